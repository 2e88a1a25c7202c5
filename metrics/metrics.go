// Package metrics holds the server's Prometheus instruments. One *Metrics is
// built in main and handed to the packages that record into it; each test
// builds its own on a fresh registry.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handshake outcomes.
const (
	HandshakeOK           = "ok"
	HandshakeUnauthorized = "unauthorized"
	HandshakeRateLimited  = "rate_limited"
	HandshakeForbidden    = "forbidden_origin"
	HandshakeDraining     = "draining"
)

// Metrics are the instruments of one server process.
type Metrics struct {
	Registry *prometheus.Registry

	SocketsConnected prometheus.Gauge
	Handshakes       *prometheus.CounterVec   // outcome
	Events           *prometheus.CounterVec   // event, outcome
	EventDuration    *prometheus.HistogramVec // event
	Disconnects      *prometheus.CounterVec   // reason
	// SlowConsumerDisconnects counts sockets closed for data they did not read.
	SlowConsumerDisconnects prometheus.Counter

	EventsRateLimited *prometheus.CounterVec // event
	SocketsRefused    prometheus.Counter     // handshakes over the sockets-per-user cap
	TokensExpired     prometheus.Counter     // connections closed at their token's exp

	AdapterPublished     prometheus.Counter
	AdapterPublishFailed prometheus.Counter
	AdapterReceived      prometheus.Counter
}

// New creates the instruments on a new registry, with the Go runtime and
// process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		SocketsConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "presenced_sockets_connected",
			Help: "Socket.IO sockets connected to this node.",
		}),
		Handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_handshakes_total",
			Help: "Socket.IO handshakes by outcome (ok, unauthorized, rate_limited, forbidden_origin, draining).",
		}, []string{"outcome"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_events_total",
			Help: "Client events handled, by event name and outcome (ok or an error code).",
		}, []string{"event", "outcome"}),
		EventDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "presenced_event_duration_seconds",
			Help:    "Time to handle a client event, up to its ack.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"event"}),
		Disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_disconnects_total",
			Help: "Socket disconnections whose disconnect work ran, by Socket.IO reason.",
		}, []string{"reason"}),
		SlowConsumerDisconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_slow_consumer_disconnects_total",
			Help: "Sockets disconnected because their client left too much outbound data unread, or unread too long.",
		}),
		EventsRateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "presenced_events_rate_limited_total",
			Help: "Client events refused with rate_limited (over the socket's limit for the event), by event name (\"unknown\" for unknown events).",
		}, []string{"event"}),
		SocketsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_sockets_refused_total",
			Help: "Handshakes refused because the user already had PRESENCE_MAX_SOCKETS_PER_USER sockets in the cluster.",
		}),
		TokensExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_tokens_expired_total",
			Help: "Connections closed because their token expired (the client reconnects with a fresh token).",
		}),
		AdapterPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_adapter_published_total",
			Help: "Messages the cluster adapter published to Redis.",
		}),
		AdapterPublishFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_adapter_publish_failures_total",
			Help: "Messages the cluster adapter could not publish (Redis unreachable or slow, queue full).",
		}),
		AdapterReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "presenced_adapter_received_total",
			Help: "Messages the cluster adapter received from Redis.",
		}),
	}
	reg.MustRegister(
		m.SocketsConnected, m.Handshakes, m.Events, m.EventDuration, m.Disconnects, m.SlowConsumerDisconnects,
		m.EventsRateLimited, m.SocketsRefused, m.TokensExpired,
		m.AdapterPublished, m.AdapterPublishFailed, m.AdapterReceived,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, o := range []string{HandshakeOK, HandshakeUnauthorized, HandshakeRateLimited, HandshakeForbidden, HandshakeDraining} {
		m.Handshakes.WithLabelValues(o)
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// AdapterObserver feeds the cluster adapter's traffic into the metrics.
type AdapterObserver struct{ M *Metrics }

// Published counts a published message.
func (o AdapterObserver) Published() { o.M.AdapterPublished.Inc() }

// PublishFailed counts a message that could not be published.
func (o AdapterObserver) PublishFailed(string, error) { o.M.AdapterPublishFailed.Inc() }

// Received counts a received message.
func (o AdapterObserver) Received() { o.M.AdapterReceived.Inc() }
