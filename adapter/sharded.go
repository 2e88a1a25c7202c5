package adapter

import (
	"github.com/zishang520/socket.io/parsers/socket/v3/parser"
	"github.com/zishang520/socket.io/servers/socket/v3"
)

// The sharded protocol, as @socket.io/redis-adapter's createShardedAdapter
// speaks it (dist/sharded-adapter.js over socket.io-adapter's
// ClusterAdapter):
//
//   every message    {type, data, uid, nsp}: JSON, or msgpack when data
//                    holds binary (types 3, 8, 9, 10, 12)
//   main channel     SPUBLISH prefix#nsp#  (requests, broadcasts)
//   room channel     SPUBLISH prefix#nsp#room#  for a broadcast without
//                    acks to one room that is not a 20-character socket id
//                    (subscriptionMode "dynamic")
//   responses        SPUBLISH prefix#nsp#<requester uid>#
//   subscriptions    SSUBSCRIBE prefix#nsp#, prefix#nsp#uid#, and
//                    prefix#nsp#room# for each room here
//   server count     PUBSUB SHARDNUMSUB prefix#nsp#

// shardedPublish publishes {type, data, uid, nsp} on channel.
func (a *NamespaceAdapter) shardedPublish(channel string, typ int, data obj, mayContainBinary bool, done func(error)) error {
	msg := obj{{"type", typ}, {"data", data}, {"uid", a.uid}, {"nsp", a.name}}
	payload, err := encodeMessage(msg, mayContainBinary)
	if err != nil {
		a.encodeFailed("message", err)
		return err
	}
	a.publish(channel, payload, true, done)
	return nil
}

func (a *NamespaceAdapter) shardedRequest(typ int, data obj) {
	_ = a.shardedPublish(a.channel, typ, data, false, nil)
}

func (a *NamespaceAdapter) shardedRespond(requesterUID string, typ int, data obj) {
	_ = a.shardedPublish(a.channel+requesterUID+"#", typ, data, true, nil)
}

func (a *NamespaceAdapter) shardedBroadcast(packet *parser.Packet, opts *socket.BroadcastOptions) {
	channel := a.channel
	if opts != nil && opts.Rooms != nil && opts.Rooms.Len() == 1 {
		if room := string(opts.Rooms.Keys()[0]); !looksLikeASocketID(room) {
			channel += room + "#"
		}
	}
	_ = a.shardedPublish(channel, clusterBroadcast, obj{
		{"packet", packetObj(packet, false)},
		{"opts", optsObj(opts, true)},
	}, true, nil)
}

func (a *NamespaceAdapter) shardedBroadcastWithAck(requestID string, packet *parser.Packet, opts *socket.BroadcastOptions) {
	// Never a room channel: every node must answer with its client count.
	_ = a.shardedPublish(a.channel, clusterBroadcast, obj{
		{"packet", packetObj(packet, false)},
		{"requestId", requestID},
		{"opts", optsObj(opts, true)},
	}, true, nil)
}

// onShardedMessage handles a message of the main, a room or our response
// channel.
func (a *NamespaceAdapter) onShardedMessage(channel, payload string) {
	m, ok := a.decodeMap(payload, "message")
	if !ok {
		return
	}
	if channel == a.responseChannel {
		a.onShardedResponse(m)
		return
	}
	uid := str(m, "uid")
	if uid == a.uid || str(m, "nsp") != a.name {
		return
	}
	data, _ := asMap(m["data"])
	t, _ := num(m, "type")
	switch int(t) {
	case clusterBroadcast:
		packet, err := decodePacket(data["packet"])
		if err != nil {
			a.ignore("broadcast packet", err)
			return
		}
		opts, ok := decodeOpts(data["opts"])
		if !ok {
			a.ignore("broadcast options", errMalformed)
			return
		}
		requestID, withAck := data["requestId"].(string)
		if !withAck {
			a.Adapter.Broadcast(packet, opts)
			a.delivered(uid, packet)
			return
		}
		a.Adapter.BroadcastWithAck(packet, opts, func(clientCount uint64) {
			a.shardedRespond(uid, clusterBroadcastClientCount, obj{
				{"requestId", requestID},
				{"clientCount", clientCount},
			})
		}, func(args []any, _ error) {
			d := obj{{"requestId", requestID}}
			if arg, ok := ackArg(args); ok {
				d = append(d, kv{"packet", arg})
			}
			a.shardedRespond(uid, clusterBroadcastAck, d)
		})

	case clusterSocketsJoin, clusterSocketsLeave:
		opts, ok := decodeOpts(data["opts"])
		rooms, roomsOK := decodeRooms(data["rooms"])
		if !ok || !roomsOK {
			return
		}
		if int(t) == clusterSocketsJoin {
			a.Adapter.AddSockets(opts, rooms)
		} else {
			a.Adapter.DelSockets(opts, rooms)
		}

	case clusterDisconnectSockets:
		closeConn, _ := data["close"].(bool)
		if opts, ok := decodeOpts(data["opts"]); ok {
			a.Adapter.DisconnectSockets(opts, closeConn)
		}

	case clusterFetchSockets:
		a.shardedRespond(uid, clusterFetchSocketsResponse, obj{
			{"requestId", str(data, "requestId")},
			{"sockets", a.fetchLocal(data["opts"])},
		})

	case clusterServerSideEmit:
		packet, _ := data["packet"].([]any)
		if len(packet) == 0 {
			return
		}
		requestID, _ := data["requestId"].(string)
		a.onServerSideEmit(packet, requestID, func(arg any, ok bool) {
			d := obj{{"requestId", requestID}}
			if ok {
				d = append(d, kv{"packet", arg})
			}
			a.shardedRespond(uid, clusterServerSideEmitResponse, d)
		})

	case clusterFetchSocketsResponse, clusterServerSideEmitResponse, clusterBroadcastClientCount, clusterBroadcastAck:
		a.onShardedResponse(m)
	}
}

func (a *NamespaceAdapter) onShardedResponse(m map[string]any) {
	data, _ := asMap(m["data"])
	requestID := str(data, "requestId")
	if requestID == "" {
		return
	}
	t, _ := num(m, "type")
	switch int(t) {
	case clusterBroadcastClientCount, clusterBroadcastAck:
		a.onBroadcastResponse(requestID, int(t) == clusterBroadcastClientCount, data)
	case clusterFetchSocketsResponse:
		a.onFetchResponse(requestID, data["sockets"])
	case clusterServerSideEmitResponse:
		a.onServerSideEmitResponse(requestID, data["packet"])
	}
}
