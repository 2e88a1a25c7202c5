package handlers

import (
	"encoding/json"
	"net/http"
)

// WriteJSON writes v as a JSON answer (no-store, nosniff); a value that
// cannot be encoded becomes a 500 with the error shape. The server, the
// REST handlers and the admin API all answer through it.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError writes the contract's error shape {"error":{"code","message"}}.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	WriteJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

// fail answers err with its contract code and status; internal and
// unavailable errors are logged (their message to the client is generic).
func (a *REST) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := classify(err)
	switch e.Code {
	case CodeInternal:
		a.log.Error("rest request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	case CodeUnavailable:
		a.log.Warn("rest request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	WriteError(w, HTTPStatus(e.Code), e.Code, e.Message)
}

func (a *REST) unauthorized(w http.ResponseWriter, reason string, tokenGiven bool) {
	challenge := `Bearer realm="presenced"`
	if tokenGiven {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	WriteError(w, http.StatusUnauthorized, CodeUnauthorized, reason)
}
