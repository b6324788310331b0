// Package limit is an adaptive concurrency limit: a bulkhead that sizes
// itself from the latency and drops of the calls it admits.
//
// A static bulkhead must be sized from measured demand, and capacity moves:
// after a deploy, beside a noisy neighbour, during a failover, a limit that
// was right becomes too high (queues build in the dependency and latency
// explodes) or too low (goodput is thrown away). A Limiter admits calls
// like a semaphore bulkhead (package bulkhead: the same waiting room, max
// wait and queue order, the same rejections, ErrLimited being a saturation)
// and moves its number of permits window by window: each call's end says
// how long it took (Permit.Done), that it signalled overload (Permit.Drop:
// a timeout, an overload answer) or nothing (Permit.Ignore), and every
// Config.WindowSamples calls, once Config.MinWindow has passed, the window's
// measurements go to an Algorithm, whose answer, clamped to [MinLimit,
// MaxLimit], is the new limit.
//
// # Keys, gates of your own, configuration
//
// Registry holds a Limiter per key (a host, an endpoint), bounded in keys;
// watertighthttp.TransportConfig.Limiters takes one. Controller is the
// deciding half of a Limiter for a Gate of the caller's own: the HTTP
// Handler (HandlerConfig.Limit) and the gRPC server (ServerConfig.Limit)
// use it to move their admission queues' limits. Limiter.Reconfigure and
// Registry.Reconfigure change the settings in place, keeping the permits in
// flight and what the algorithm has learnt; contrib/watertightconfig reads
// them from a limiters: section. Errors name the field and the rule
// (limit.New, NewController, NewPartitioned); invalid options of NewAIMD,
// NewVegas and NewGradient2 come back as New's error.
//
// # Partitions
//
// NewPartitioned shares one adaptive limit between partitions of the
// traffic (criticalities, tenants): each is guaranteed its share and
// borrows what the others leave unused, so under overload the partitions
// with small shares give way first.
//
// # Algorithms
//
// NewDefault, watertight's own, is the default. AIMD, Vegas and Gradient2,
// with the defaults of Netflix's concurrency-limits, are there for those who
// know them. An Algorithm is a small interface: write your own.
//
// # Costs
//
// Acquire and Done cost the bulkhead's acquire and release and a few atomic
// adds to the current window; nothing allocates, no lock is taken, and the
// clock is read only once per window (to apply MinWindow). As a
// watertight.Policy (Enter, Exit) the Limiter measures each call itself,
// which reads the clock twice per call.
//
// # Events
//
// With a Config.Listener, every change of the limit is an
// EventLimitChanged, whose Code names the algorithm (CodeAIMD "aimd",
// CodeVegas "vegas", CodeGradient2 "gradient2", CodeWatertight "watertight",
// CodeCustom "custom" for an Algorithm of your own), and the inner
// bulkhead's events (rejections, and per
// call EventAcquired and EventReleased) come with Source "bulkhead".
package limit
