// Package admin serves the router service's operator views: GET
// /debug/workers (every worker, its ranks and cache owners, readiness and
// index sizes), POST /debug/route (the decision a request would get,
// nothing sent) and GET /metrics, the Prometheus exposition of the
// collectors each package registers, plus the router state gauges and the
// Go runtime's and the process's collectors registered here. They are
// mounted on a listener of their own (serve's --admin-listen, loopback by
// default), never on the OpenAI port: they tell whose prefixes are cached
// and where the runners listen.
package admin
