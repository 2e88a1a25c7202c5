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
		SocketsConnected: NewGauge("presenced_sockets_connected",
			"Socket.IO sockets connected to this node."),
		Handshakes: NewCounterVec("presenced_handshakes_total",
			"Socket.IO handshakes by outcome (ok, unauthorized, rate_limited, forbidden_origin, draining).", "outcome"),
		Events: NewCounterVec("presenced_events_total",
			"Client events handled, by event name and outcome (ok or an error code).", "event", "outcome"),
		EventDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "presenced_event_duration_seconds",
			Help:    "Time to handle a client event, up to its ack.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"event"}),
		Disconnects: NewCounterVec("presenced_disconnects_total",
			"Socket disconnections whose disconnect work ran, by Socket.IO reason.", "reason"),
		SlowConsumerDisconnects: NewCounter("presenced_slow_consumer_disconnects_total",
			"Sockets disconnected because their client left too much outbound data unread, or unread too long."),
		EventsRateLimited: NewCounterVec("presenced_events_rate_limited_total",
			"Client events refused with rate_limited (over the socket's limit for the event), by event name (\"unknown\" for unknown events).", "event"),
		SocketsRefused: NewCounter("presenced_sockets_refused_total",
			"Handshakes refused because the user already had PRESENCE_MAX_SOCKETS_PER_USER sockets in the cluster."),
		TokensExpired: NewCounter("presenced_tokens_expired_total",
			"Connections closed because their token expired (the client reconnects with a fresh token)."),
		AdapterPublished: NewCounter("presenced_adapter_published_total",
			"Messages the cluster adapter published to Redis."),
		AdapterPublishFailed: NewCounter("presenced_adapter_publish_failures_total",
			"Messages the cluster adapter could not publish (Redis unreachable or slow, queue full)."),
		AdapterReceived: NewCounter("presenced_adapter_received_total",
			"Messages the cluster adapter received from Redis."),
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

// NewCounter is a counter with the given name and help.
func NewCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// NewCounterVec is a counter vector with the given name, help and labels.
func NewCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// NewGauge is a gauge with the given name and help.
func NewGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// NewHistogram is a histogram with the given name, help and buckets.
func NewHistogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
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
