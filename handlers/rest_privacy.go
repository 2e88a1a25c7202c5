package handlers

import (
	"encoding/json"
	"net/http"

	"github.com/presenced/presenced/store"
)

// GET /me/privacy
func (a *REST) getPrivacy(w http.ResponseWriter, r *http.Request) {
	viewer := viewerOf(r.Context())
	settings, err := a.d.Store.Privacy(r.Context(), []string{viewer})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := settings[viewer]
	if v == "" {
		v = store.DefaultVisibility
	}
	WriteJSON(w, http.StatusOK, map[string]any{"lastSeen": v})
}

// PUT /me/privacy {lastSeen}
func (a *REST) putPrivacy(w http.ResponseWriter, r *http.Request) {
	obj, err := readObject(w, r, MaxBodyBytes)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	raw, ok := obj["lastSeen"]
	if !ok {
		a.fail(w, r, errorf(CodeInvalidArgument, "lastSeen is required"))
		return
	}
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil || !store.Visibility(s).Valid() {
		a.fail(w, r, errorf(CodeInvalidArgument, `lastSeen must be "everyone", "contacts" or "nobody"`))
		return
	}
	v := store.Visibility(s)
	user := viewerOf(r.Context())
	if err := a.d.Store.SetPrivacy(r.Context(), user, v); err != nil {
		a.fail(w, r, err)
		return
	}
	ctx, cancel := writeContext(r)
	defer cancel()
	var told error
	if a.d.SettingSaved != nil {
		told = a.d.SettingSaved(ctx, user)
	}
	if a.d.Settings != nil {
		a.d.Settings.Set(user, v)
	}
	if a.d.PrivacyChanged != nil {
		a.d.PrivacyChanged(ctx, user, v)
	}
	if told != nil {
		a.log.Warn("privacy setting saved, but the presence readers were not told", "user_id", user, "err", told)
		a.fail(w, r, errorf(CodeUnavailable, "the setting is saved, but not every node has learnt it yet; retry"))
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"lastSeen": v})
}
