package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/presenced/presenced/ids"
)

// pathID reads and validates an id path parameter.
func pathID(r *http.Request, name string) (string, error) {
	raw := chi.URLParam(r, name)
	id, err := url.PathUnescape(raw)
	if err != nil || !ids.Valid(id) {
		return "", errorf(CodeInvalidArgument, "%s must be %s", name, ids.Rule)
	}
	return id, nil
}

// tooLongDrain bounds the reading of what is left of a body refused as too
// long, once it has been answered (readObject).
const tooLongDrain = time.Second

// readObject reads a body of at most limit bytes that must be exactly one
// JSON object (unknown fields are the caller's to ignore).
func readObject(w http.ResponseWriter, r *http.Request, limit int64) (map[string]json.RawMessage, error) {
	if r.ContentLength > limit {
		// Refused before reading: a body declared too long was read until
		// the limit, or until the read deadline (30 s) if it never came,
		// and then answered 400. The connection closes after the answer.
		// net/http reads what is left of a body of up to 256 KiB after the
		// answer, so that the client, still writing it, can read the
		// answer (closed with its data unread, the connection is reset,
		// and the client may see only that); that read gets tooLongDrain.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(tooLongDrain))
		w.Header().Set("Connection", "close")
		return nil, errorf(CodeLimitExceeded, "request body is larger than %d bytes", limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, errorf(CodeLimitExceeded, "request body is larger than %d bytes", limit)
		}
		return nil, errorf(CodeInvalidArgument, "unreadable request body")
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errorf(CodeInvalidArgument, "request body must be a JSON object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return nil, errorf(CodeInvalidArgument, "request body is not valid JSON: %s", jsonProblem(err))
	}
	return obj, nil
}

// jsonProblem is a short client-safe description of a JSON syntax error.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return "malformed"
}

// checkIDCount bounds the length of a list of ids (REST bodies and socket
// payloads alike): over the maximum is limit_exceeded.
func checkIDCount(field string, n, minN, maxN int) error {
	if n > maxN {
		return errorf(CodeLimitExceeded, "%s has %d ids; at most %d allowed", field, n, maxN)
	}
	if n < minN {
		return errorf(CodeInvalidArgument, "%s must hold at least %d id", field, minN)
	}
	return nil
}

// idList reads field as an array of ids, with between min and max
// elements (more than max is 413 limit_exceeded).
func idList(obj map[string]json.RawMessage, field string, minN, maxN int) ([]string, error) {
	raw, ok := obj[field]
	if !ok {
		return nil, errIDListMissing(field)
	}
	if len(raw) == 0 || raw[0] != '[' {
		return nil, errIDListType(field)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errIDListType(field)
	}
	if err := checkIDCount(field, len(items), minN, maxN); err != nil {
		return nil, err
	}
	list := make([]string, len(items))
	for i, it := range items {
		if len(it) == 0 || it[0] != '"' {
			return nil, errorf(CodeInvalidArgument, "%s[%d] must be a string", field, i)
		}
		if err := json.Unmarshal(it, &list[i]); err != nil {
			return nil, errorf(CodeInvalidArgument, "%s[%d] must be a string", field, i)
		}
		if !ids.Valid(list[i]) {
			return nil, errIDAt(field, i)
		}
	}
	return list, nil
}

// The words of a bad list of user ids, the same on the socket and REST
// (they differed: a docs audit, 2026-12-07).
func errIDListMissing(field string) error {
	return errorf(CodeInvalidArgument, "%s is required (an array of user ids)", field)
}

func errIDListType(field string) error {
	return errorf(CodeInvalidArgument, "%s must be an array of user ids", field)
}

func errIDAt(field string, i int) error {
	return errorf(CodeInvalidArgument, "%s[%d] must be %s", field, i, ids.Rule)
}
