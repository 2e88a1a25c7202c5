package handlers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/presenced/presenced/ids"
)

// serviceWrite runs a service route: it reads the id in the path (param)
// and the list {userIds} (0 to MaxServiceIDs) in the body, runs write with
// them, and answers write's body with 200, or the error. write runs under
// writeContext.
func (a *REST) serviceWrite(w http.ResponseWriter, r *http.Request, param string,
	write func(ctx context.Context, id string, list []string) (map[string]any, error)) {
	id, err := pathID(r, param)
	var list []string
	if err == nil {
		var obj map[string]json.RawMessage
		if obj, err = readObject(w, r, MaxServiceBodyBytes); err == nil {
			list, err = idList(obj, "userIds", 0, MaxServiceIDs)
		}
	}
	var body map[string]any
	if err == nil {
		ctx, cancel := writeContext(r)
		body, err = write(ctx, id, list)
		cancel()
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, body)
}

// writeContext is the context of a write a request makes: bounded by
// serviceTimeout, and not canceled when the caller goes away, so that a
// write and what follows it run to completion.
func writeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), serviceTimeout)
}

// PUT /service/conversations/{conversationId}/members {userIds}
func (a *REST) setMembers(w http.ResponseWriter, r *http.Request) {
	a.serviceWrite(w, r, "conversationId", a.writeMembers)
}

// writeMembers saves a conversation's members and takes the removed users'
// sockets out of its room. The eviction runs to completion even if the
// caller goes away (serviceWrite), so that removed users are not left in
// the room.
func (a *REST) writeMembers(ctx context.Context, conv string, members []string) (map[string]any, error) {
	removed, err := a.d.Store.SetMembers(ctx, conv, members)
	if err != nil {
		return nil, err
	}
	if f, ok := a.d.Membership.(interface{ Forget(string) }); ok {
		f.Forget(conv)
	}
	removed = ids.Sorted(removed)
	if a.d.Evict != nil {
		// The member list is saved either way. A node that did not
		// confirm the eviction is told again in the background, and a node
		// whose subscription was lost checks its sockets when it is back
		// (cluster.go); a retry of this request would find nothing to
		// remove.
		if err := a.d.Evict(ctx, conv, removed); err != nil {
			a.log.Warn("membership change not applied on every node yet", "conversation_id", conv, "removed", len(removed), "err", err)
		}
	}
	return map[string]any{
		"conversationId": conv,
		"members":        len(ids.Sorted(members)),
		"removed":        removed,
	}, nil
}

// PUT /service/users/{userId}/contacts {userIds}
func (a *REST) setContacts(w http.ResponseWriter, r *http.Request) {
	a.serviceWrite(w, r, "userId", func(ctx context.Context, user string, contacts []string) (map[string]any, error) {
		if err := a.d.Store.SetContacts(ctx, user, contacts); err != nil {
			return nil, err
		}
		if a.d.ContactsChanged != nil {
			a.d.ContactsChanged(ctx, user)
		}
		return map[string]any{"userId": user, "contacts": len(ids.Sorted(contacts))}, nil
	})
}
