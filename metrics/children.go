package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// A vector's WithLabelValues checks and hashes its labels and takes the vector's lock on every
// call. The request path made six such calls per request (a few microseconds of a status
// read's CPU), always for the same few label sets, so the children it uses are looked up once
// per label set and kept here. The vectors keep their children as long anyway.

// routeKey is one label set of the request metrics.
type routeKey struct {
	route, method string
	status        int
}

// routeChildren are the request metrics' children for one routeKey.
type routeChildren struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// classChildren are the admission metrics' children for one class: a shed request, which
// must stay cheap under overload, looks up its class's as an admitted one does.
type classChildren struct {
	admitted prometheus.Counter
	wait     prometheus.Observer
	inFlight prometheus.Gauge
	shed     prometheus.Counter
	shedWait prometheus.Observer
	waiting  prometheus.Gauge
}

// childCache maps label sets to their children; a label set's first lookup fills it.
type childCache[K comparable, V any] struct {
	m sync.Map // K → V
}

func (c *childCache[K, V]) get(k K, newChild func(K) V) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	v, _ := c.m.LoadOrStore(k, newChild(k))
	return v.(V)
}

func (m *Metrics) routeChildren(route, method string, status int) routeChildren {
	return m.routes.get(routeKey{route, method, status}, func(k routeKey) routeChildren {
		return routeChildren{
			requests: m.httpRequests.WithLabelValues(k.route, k.method, strconv.Itoa(k.status)),
			duration: m.httpDuration.WithLabelValues(k.route, k.method),
		}
	})
}

func (m *Metrics) classChildren(class string) classChildren {
	return m.classes.get(class, func(class string) classChildren {
		return classChildren{
			admitted: m.admitted.WithLabelValues(class),
			wait:     m.admissionWait.WithLabelValues(class),
			inFlight: m.inFlight.WithLabelValues(class),
			shed:     m.shed.WithLabelValues(class),
			shedWait: m.shedWait.WithLabelValues(class),
			waiting:  m.waiting.WithLabelValues(class),
		}
	})
}
