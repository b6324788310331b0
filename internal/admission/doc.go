// Package admission is the in-flight limit and wait queue of one route or
// method, shared by the HTTP Handler (watertighthttp) and the gRPC server
// interceptors (contrib/watertightgrpc). It is not API.
//
// A Queue lets at most maxConcurrent requests in at once and keeps at most
// maxQueue waiting. Its discipline is the Handler's: the highest criticality
// is let in first; among equals, FIFO while the queue is at most half full
// and LIFO beyond (adaptive LIFO, Facebook's "Fail at Scale", 2015); a full
// queue makes room for a newcomer by displacing the oldest waiter of the
// lowest criticality below the newcomer's; waiters whose context ended are
// dropped. The fast path (a place free, nobody waiting) is one CAS to enter
// and one atomic add to leave: no mutex, no allocation.
//
// The errors a Queue returns are this package's sentinels (ErrFull,
// ErrDisplaced, ErrGaveUp, ErrMaxWait): the adapters map them to their own.
//
// Refs counts the holders of a Queue kept in a table that evicts idle
// entries, so that a key never has two queues in use at once.
//
// Clients is the adapters' per-client limit: a bounded table of the
// requests each client has in flight.
package admission
