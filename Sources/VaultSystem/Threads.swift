@preconcurrency import Glibc

/// Starts a detached POSIX thread running `body` (`pthread_create`), with a
/// small stack: connection threads spend their life in `poll` and `read`.
/// Used for blocking work that must stay off Swift's cooperative pool.
public func spawnThread(stackSize: Int = 256 * 1024, _ body: @escaping @Sendable () -> Void) throws(SystemError) {
    final class Box: @unchecked Sendable {  // handed to exactly one thread, which consumes it
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var attr = pthread_attr_t()
    pthread_attr_init(&attr)
    defer { pthread_attr_destroy(&attr) }
    pthread_attr_setstacksize(&attr, stackSize)
    pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let r = pthread_create(&thread, &attr, { arg in
        let box = Unmanaged<AnyObject>.fromOpaque(arg!).takeRetainedValue() as! Box
        box.body()
        return nil
    }, box)
    if r != 0 {
        Unmanaged<AnyObject>.fromOpaque(box).release()
        throw SystemError("pthread_create", "thread", errno: r)
    }
}

/// Blocks `signals` in the calling thread (and the threads it starts), so
/// that one thread can take them with `waitForSignal`.
public func blockSignals(_ signals: [Int32]) {
    var set = sigset_t()
    sigemptyset(&set)
    for s in signals { sigaddset(&set, s) }
    pthread_sigmask(SIG_BLOCK, &set, nil)
}

/// Waits for one of `signals` (`sigwait`); they must be blocked in every thread.
public func waitForSignal(_ signals: [Int32]) -> Int32 {
    var set = sigset_t()
    sigemptyset(&set)
    for s in signals { sigaddset(&set, s) }
    var sig: Int32 = 0
    while sigwait(&set, &sig) != 0 {}
    return sig
}
