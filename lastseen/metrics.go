package lastseen

import (
	"github.com/prometheus/client_golang/prometheus"

	prom "github.com/presenced/presenced/metrics"
)

// metrics of one Pipeline; registered by whoever owns the registry, through
// Collectors.
type metrics struct {
	records                     *prometheus.CounterVec
	buffered, coarsened, exact  prometheus.Counter
	statements, rows            prometheus.Counter
	batchRows                   prometheus.Histogram
	errors, requeued, trimmed   prometheus.Counter
	duration                    prometheus.Histogram
	dirty, claimed, bufferUsers prometheus.Gauge
	recent                      prometheus.GaugeFunc
}

func newMetrics(p *Pipeline) *metrics {
	m := &metrics{
		records: prom.NewCounterVec("presenced_lastseen_records_total",
			"Last-seen records by result: buffered (queued for the buffer; with Redis, activity queued for the store, written at the next flush), coarsened (dropped within the coarse interval), exact (offline time, written at once).", "result"),
		statements: prom.NewCounter("presenced_lastseen_flush_statements_total",
			"Store write statements sent by last-seen flushes (one per batch), failed ones included."),
		rows: prom.NewCounter("presenced_lastseen_flush_rows_total",
			"Users written to the store by successful last-seen flush statements."),
		batchRows: prom.NewHistogram("presenced_lastseen_flush_batch_rows",
			"Users per successful last-seen flush statement.",
			[]float64{1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000}),
		errors: prom.NewCounter("presenced_lastseen_flush_errors_total",
			"Last-seen flushes that failed (their users stay dirty; activity records written directly stay queued on their node)."),
		requeued: prom.NewCounter("presenced_lastseen_requeued_total",
			"Users whose claim outlived the claim timeout (a dead flusher) and were made dirty again."),
		trimmed: prom.NewCounter("presenced_lastseen_trimmed_total",
			"Written users forgotten by the buffer after the retention period."),
		duration: prom.NewHistogram("presenced_lastseen_flush_duration_seconds",
			"Duration of last-seen flushes.", prometheus.DefBuckets),
		dirty: prom.NewGauge("presenced_lastseen_dirty_users",
			"Users waiting to be written to the store (after the last flush)."),
		claimed: prom.NewGauge("presenced_lastseen_claimed_users",
			"Users claimed by a flusher and not yet acknowledged (after the last flush)."),
		bufferUsers: prom.NewGauge("presenced_lastseen_buffer_users",
			"Users with a time in the last-seen buffer (after the last flush)."),
	}
	m.recent = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "presenced_lastseen_coarse_entries",
		Help: "Users in this node's coarsening map.",
	}, func() float64 { return float64(p.recentLen()) })
	m.buffered = m.records.WithLabelValues("buffered")
	m.coarsened = m.records.WithLabelValues("coarsened")
	m.exact = m.records.WithLabelValues("exact")
	return m
}

// Collectors returns the pipeline's Prometheus collectors, for the owner of
// the registry to register.
func (p *Pipeline) Collectors() []prometheus.Collector {
	m := p.m
	return []prometheus.Collector{
		m.records, m.statements, m.rows, m.batchRows, m.errors, m.requeued,
		m.trimmed, m.duration, m.dirty, m.claimed, m.bufferUsers, m.recent,
	}
}
