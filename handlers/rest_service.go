package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/presenced/presenced/ids"
)

// serviceList reads what both service routes take: the id in the path
// and the list {userIds} (0 to MaxServiceIDs) in the body. On a bad
// request it answers and returns false.
func (a *REST) serviceList(w http.ResponseWriter, r *http.Request, param string) (string, []string, bool) {
	id, err := pathID(r, param)
	if err == nil {
		var obj map[string]json.RawMessage
		obj, err = readObject(w, r, MaxServiceBodyBytes)
		if err == nil {
			var ids []string
			ids, err = idList(obj, "userIds", 0, MaxServiceIDs)
			if err == nil {
				return id, ids, true
			}
		}
	}
	a.fail(w, r, err)
	return "", nil, false
}

// writeContext is the context of a write a request makes: bounded by
// serviceTimeout, and not canceled when the caller goes away, so that a
// write and what follows it run to completion.
func writeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), serviceTimeout)
}

// PUT /service/conversations/{conversationId}/members {userIds}
func (a *REST) setMembers(w http.ResponseWriter, r *http.Request) {
	conv, members, ok := a.serviceList(w, r, "conversationId")
	if !ok {
		return
	}
	// The write and the eviction run to completion even if the caller
	// goes away, so that removed users are not left in the room.
	ctx, cancel := writeContext(r)
	defer cancel()
	removed, err := a.d.Store.SetMembers(ctx, conv, members)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if f, ok := a.d.Membership.(interface{ Forget(string) }); ok {
		f.Forget(conv)
	}
	removed = ids.Sorted(removed)
	if a.d.Evict != nil {
		// The member list is saved either way; a failed eviction leaves
		// the removed users' sockets in the room until they leave, and a
		// retry of this request would find nothing to remove.
		if err := a.d.Evict(ctx, conv, removed); err != nil {
			a.log.Error("membership change not applied on every node", "conversation_id", conv, "removed", len(removed), "err", err)
		}
	}
	WriteJSON(w, http.StatusOK, map[string]any{
		"conversationId": conv,
		"members":        len(ids.Sorted(members)),
		"removed":        removed,
	})
}

// PUT /service/users/{userId}/contacts {userIds}
func (a *REST) setContacts(w http.ResponseWriter, r *http.Request) {
	user, contacts, ok := a.serviceList(w, r, "userId")
	if !ok {
		return
	}
	ctx, cancel := writeContext(r)
	defer cancel()
	if err := a.d.Store.SetContacts(ctx, user, contacts); err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"userId": user, "contacts": len(ids.Sorted(contacts))})
}
