@preconcurrency import Glibc
internal import CTokenVaultLinux

/// A one-shot timer on the wall clock (`timerfd_create(CLOCK_REALTIME)`,
/// armed with `TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET`): it fires at a
/// wall-clock instant even across suspend, and wakes its waiter when the
/// clock is set, so deadlines are re-evaluated instead of waiting on a stale timer.
public final class WallClockTimer: Sendable {
    /// What ended a wait.
    public enum Event: Sendable { case fired, clockChanged, woken }

    private let fd: Int32
    private let wakePipe: WakePipe

    public init() throws(SystemError) {
        fd = ctv_realtime_timerfd()
        guard fd >= 0 else { throw SystemError("timerfd_create", "CLOCK_REALTIME") }
        wakePipe = try WakePipe()
    }

    deinit { close(fd) }

    /// Arms the timer for Unix time `seconds`, or disarms it with nil.
    public func arm(at seconds: Double?) {
        _ = ctv_timerfd_arm_at(fd, seconds.map { max($0, 0.000001) } ?? 0)
    }

    /// Wakes a `wait()` from another thread.
    public func wake() { wakePipe.wake() }

    /// Blocks until the timer fires, the clock is set, or `wake()` is called.
    public func wait() -> Event {
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wakePipe.readFD, events: Int16(POLLIN), revents: 0)]
        while true {
            let r = poll(&fds, 2, -1)
            if r < 0 && errno == EINTR { continue }
            break
        }
        if fds[1].revents != 0 {
            wakePipe.drain()
            return .woken
        }
        var expirations: UInt64 = 0
        let n = read(fd, &expirations, 8)
        if n < 0 && errno == ECANCELED { return .clockChanged }
        return .fired
    }
}

extension WakePipe {
    /// Reads every pending wake byte.
    public func drain() {
        var buf = [UInt8](repeating: 0, count: 64)
        while read(readFD, &buf, buf.count) > 0 {}
    }
}
