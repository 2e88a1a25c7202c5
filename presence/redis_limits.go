package presence

// Nodes of a release before 2026-12-06 reserved a place among a user's
// sockets at the handshake (a sorted set by deadline, usr, in slot {g}) and
// counted the socket at its Connect. The cap is now checked by the connect
// script itself (userConnect, Socket.Max), which still counts the live
// reservations of such nodes, so that a cluster being upgraded keeps the
// cap.

// userReserved is the key of a user's reservations (slot {g}).
func (e *RedisEngine) userReserved(user string) string {
	return e.rcfg.Prefix + ":{g}:usr:" + user
}
