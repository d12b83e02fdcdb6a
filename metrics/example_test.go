package metrics_test

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/metrics"
)

// Export a replica's figures on /metrics.
func ExampleNewCollector() {
	var node *fencelock.Node // started with fencelock.Start
	prometheus.MustRegister(metrics.NewCollector(node))
	http.Handle("/metrics", promhttp.Handler())
}
