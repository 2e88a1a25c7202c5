package adapter

import (
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"
)

// The classic protocol, as @socket.io/redis-adapter's createAdapter speaks it
// (dist/index.js):
//
//   broadcast        PUBLISH prefix#nsp#room#  (one room) or prefix#nsp#,
//                    msgpack [uid, {type, data, nsp}, {rooms, except, flags}]
//   requests         PUBLISH prefix-request#nsp#, JSON {uid, requestId, type, ...}
//                    (a broadcast with acks, type 7, is msgpack)
//   responses        PUBLISH prefix-response#nsp#, JSON {requestId, ...}
//                    (a client's ack, type 9, is msgpack)
//   subscriptions    PSUBSCRIBE prefix#nsp#*; SUBSCRIBE prefix-request#nsp#,
//                    prefix-response#nsp#, prefix-response#nsp#uid#
//   server count     PUBSUB NUMSUB prefix-request#nsp#

func (a *NamespaceAdapter) classicBroadcast(packet *parser.Packet, opts *socket.BroadcastOptions) {
	payload, err := encodeMsgpack([]any{a.uid, packetObj(packet, true), optsObj(opts, true)})
	if err != nil {
		a.encodeFailed("broadcast", err)
		return
	}
	channel := a.channel
	if opts != nil && opts.Rooms != nil && opts.Rooms.Len() == 1 {
		channel += string(opts.Rooms.Keys()[0]) + "#"
	}
	a.publish(channel, payload, false, nil)
}

func (a *NamespaceAdapter) classicBroadcastWithAck(requestID string, packet *parser.Packet, opts *socket.BroadcastOptions) {
	payload, err := encodeMsgpack(obj{
		{"uid", a.uid},
		{"requestId", requestID},
		{"type", classicBroadcast},
		{"packet", packetObj(packet, true)},
		{"opts", optsObj(opts, true)},
	})
	if err != nil {
		a.encodeFailed("broadcast with ack", err)
		return
	}
	a.publish(a.requestChannel, payload, false, nil)
}

// classicRequest publishes a JSON request that expects no answer.
func (a *NamespaceAdapter) classicRequest(msg obj) {
	payload, err := appendJSON(nil, msg)
	if err != nil {
		a.encodeFailed("request", err)
		return
	}
	a.publish(a.requestChannel, payload, false, nil)
}

// classicRespond publishes a response on the common response channel (as
// Node does unless publishOnSpecificResponseChannel is set).
func (a *NamespaceAdapter) classicRespond(msg obj, msgpack bool) {
	var payload []byte
	var err error
	if msgpack {
		payload, err = encodeMsgpack(msg)
	} else {
		payload, err = appendJSON(nil, msg)
	}
	if err != nil {
		a.encodeFailed("response", err)
		return
	}
	a.publish(a.responseChannel, payload, false, nil)
}

func (a *NamespaceAdapter) hasRoom(room string) bool {
	return a.local.HasRoom(socket.Room(room))
}

// onClassicBroadcast handles a message of the broadcast pattern. With
// emitterOnly (sharded mode accepting the classic emitter), only messages of
// @socket.io/redis-emitter are taken.
func (a *NamespaceAdapter) onClassicBroadcast(channel, payload string, emitterOnly bool) {
	if len(channel) < len(a.channel) || channel[:len(a.channel)] != a.channel {
		return
	}
	if len(channel) > len(a.channel)+1 {
		room := channel[len(a.channel) : len(channel)-1]
		if !a.hasRoom(room) {
			return // nobody here is in that room
		}
	}
	v, err := decodeMsgpack([]byte(payload))
	if err != nil {
		a.ignore("broadcast", err)
		return
	}
	msg, ok := v.([]any)
	if !ok || len(msg) < 3 {
		a.ignore("broadcast", errMalformed)
		return
	}
	uid, _ := msg[0].(string)
	if uid == a.uid || (emitterOnly && uid != emitterUID) {
		return
	}
	packet, err := decodePacket(msg[1])
	if err != nil {
		a.ignore("broadcast packet", err)
		return
	}
	if packet.Nsp != a.name {
		return
	}
	opts, ok := decodeOpts(msg[2])
	if !ok {
		a.ignore("broadcast options", errMalformed)
		return
	}
	a.Adapter.Broadcast(packet, opts)
	a.delivered(uid, packet)
}

// onClassicRequest handles a request of another node or of an emitter.
func (a *NamespaceAdapter) onClassicRequest(payload string, emitterOnly bool) {
	m, ok := a.decodeMap(payload, "request")
	if !ok {
		return
	}
	t, _ := num(m, "type")
	uid := str(m, "uid")
	if uid != "" && uid == a.uid {
		return // our own request: already applied here
	}
	requestID := str(m, "requestId")
	if emitterOnly {
		if (uid != "" && uid != emitterUID) || requestID != "" {
			return
		}
		switch int(t) {
		case classicRemoteJoin, classicRemoteLeave, classicRemoteDisconnect, classicServerSideEmit:
		default:
			return
		}
	}
	switch int(t) {
	case classicSockets:
		rooms, ok := decodeRooms(m["rooms"])
		if !ok {
			return
		}
		sids := a.Adapter.Sockets(types.NewSet(rooms...))
		list := make([]any, 0, sids.Len())
		for _, id := range sids.Keys() {
			list = append(list, string(id))
		}
		a.classicRespond(obj{{"requestId", requestID}, {"sockets", list}}, false)

	case classicAllRooms:
		rooms := a.local.RoomNames()
		a.classicRespond(obj{{"requestId", requestID}, {"rooms", roomSlice(rooms)}}, false)

	case classicRemoteJoin, classicRemoteLeave, classicRemoteDisconnect:
		if has(m, "opts") {
			opts, ok := decodeOpts(m["opts"])
			rooms, roomsOK := decodeRooms(m["rooms"])
			if !ok || !roomsOK {
				a.ignore("remote join, leave or disconnect (options or rooms)", errMalformed)
				return
			}
			switch int(t) {
			case classicRemoteJoin:
				a.Adapter.AddSockets(opts, rooms)
			case classicRemoteLeave:
				a.Adapter.DelSockets(opts, rooms)
			default:
				closeConn, _ := m["close"].(bool)
				a.Adapter.DisconnectSockets(opts, closeConn)
			}
			return
		}
		// The per-socket form of older versions: {sid, room} or {sid, close}.
		s, ok := a.nsp.Sockets().Load(socket.SocketId(str(m, "sid")))
		if !ok {
			return
		}
		switch int(t) {
		case classicRemoteJoin:
			s.Join(roomOf(m["room"]))
		case classicRemoteLeave:
			s.Leave(roomOf(m["room"]))
		default:
			closeConn, _ := m["close"].(bool)
			s.Disconnect(closeConn)
		}
		a.classicRespond(obj{{"requestId", requestID}}, false)

	case classicRemoteFetch:
		a.classicRespond(obj{{"requestId", requestID}, {"sockets", a.fetchLocal(m["opts"])}}, false)

	case classicServerSideEmit:
		data, _ := m["data"].([]any)
		if len(data) == 0 {
			return
		}
		a.onServerSideEmit(data, requestID, func(arg any, ok bool) {
			resp := obj{{"type", classicServerSideEmit}, {"requestId", requestID}}
			if ok {
				resp = append(resp, kv{"data", arg})
			}
			a.classicRespond(resp, false)
		})

	case classicBroadcast:
		if a.ackRequest(requestID) != nil {
			return // our own
		}
		packet, err := decodePacket(m["packet"])
		if err != nil {
			return
		}
		opts, ok := decodeOpts(m["opts"])
		if !ok {
			return
		}
		a.Adapter.BroadcastWithAck(packet, opts, func(clientCount uint64) {
			a.classicRespond(obj{
				{"type", classicBroadcastClientCount},
				{"requestId", requestID},
				{"clientCount", clientCount},
			}, false)
		}, func(args []any, _ error) {
			resp := obj{{"type", classicBroadcastAck}, {"requestId", requestID}}
			if arg, ok := ackArg(args); ok {
				resp = append(resp, kv{"packet", arg})
			}
			a.classicRespond(resp, true)
		})
	}
}

// onClassicResponse handles a response to one of our requests.
func (a *NamespaceAdapter) onClassicResponse(payload string) {
	m, ok := a.decodeMap(payload, "")
	if !ok {
		return
	}
	requestID := str(m, "requestId")
	if requestID == "" {
		return
	}
	if a.ackRequest(requestID) != nil {
		if t, _ := num(m, "type"); int(t) == classicBroadcastClientCount || int(t) == classicBroadcastAck {
			a.onBroadcastResponse(requestID, int(t) == classicBroadcastClientCount, m)
		}
		return
	}
	a.mu.Lock()
	r := a.requests[requestID]
	a.mu.Unlock()
	if r == nil {
		return
	}
	switch r.kind {
	case reqFetch:
		a.onFetchResponse(requestID, m["sockets"])
	case reqAllRooms:
		a.onAllRoomsResponse(requestID, m["rooms"])
	case reqServerSideEmit:
		a.onServerSideEmitResponse(requestID, m["data"])
	}
}
