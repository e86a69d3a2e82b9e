// Progress for communicators that nobody is driving. UCX completes a send once it holds the message, so a call can
// return while the worker still holds its last bytes: over TCP the end of an eager message waits in the
// endpoint's buffer when the socket is full, and a rendezvous reply or acknowledgement may wait in its queue. Only
// a later progress of that worker sends them. A rank that returned from a call and then waits elsewhere (on
// another communicator, in another library, in its own compute) would stall the peers that need those bytes until
// their timeout. One thread per process progresses every registered communicator's transport every
// kIdleProgressIntervalMs, unless its own engine ran since the last look or runs now (Comm::transport_mutex_; the
// engine's own lock is not needed, so this also reaches a communicator whose thread waits in bagua_comm_split).
// Only thread-safe transports (a UCX built with thread support) take part. The thread is joined by an atexit handler,
// which glibc runs before the libraries' destructors (and at dlclose of this library); fork() waits for a pass under
// way, and the child starts without the thread.
#pragma once

namespace bagua {

class Comm;

constexpr int kIdleProgressIntervalMs = 2;

// Both from any thread. remove() returns once the thread no longer touches `comm`; the thread stops with the last
// communicator and starts again with the next (but not once exit() has begun).
void idle_progress_add(Comm* comm);
void idle_progress_remove(Comm* comm);

}  // namespace bagua
