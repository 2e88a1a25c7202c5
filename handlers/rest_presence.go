package handlers

import (
	"fmt"
	"net/http"

	"github.com/presenced/presenced/lastseen"
)

// GET /users/{userId}/presence
func (a *REST) userPresence(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "userId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ps, err := a.d.Presences.Presences(r.Context(), viewerOf(r.Context()), []string{id})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if len(ps) != 1 {
		a.fail(w, r, fmt.Errorf("rest: %d presences for 1 user", len(ps)))
		return
	}
	WriteJSON(w, http.StatusOK, ps[0])
}

// POST /presence/query {userIds}
func (a *REST) queryPresence(w http.ResponseWriter, r *http.Request) {
	obj, err := readObject(w, r, MaxBodyBytes)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ids, err := idList(obj, "userIds", 1, MaxQueryIDs)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ps, err := a.d.Presences.Presences(r.Context(), viewerOf(r.Context()), ids)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if ps == nil {
		ps = []lastseen.Presence{}
	}
	WriteJSON(w, http.StatusOK, map[string]any{"presences": ps})
}

// GET /conversations/{conversationId}/presence
func (a *REST) conversationPresence(w http.ResponseWriter, r *http.Request) {
	conv, err := pathID(r, "conversationId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ok, err := a.d.Membership.IsMember(r.Context(), conv, viewerOf(r.Context()))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !ok {
		a.fail(w, r, errorf(CodeForbidden, "not a member of this conversation"))
		return
	}
	res, err := a.d.Rosters.Roster(r.Context(), conv)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	typing := res.Typing
	if typing == nil {
		typing = []string{}
	}
	WriteJSON(w, http.StatusOK, map[string]any{
		"conversationId": conv,
		"online":         rosterPayload(r.Context(), a.d.Settings, res.Online),
		"typing":         typing,
	})
}
