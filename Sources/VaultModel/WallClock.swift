#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import Synchronization

/// Wall-clock time in seconds since the Unix epoch, for provider expiry
/// instants only; waiting uses `ContinuousClock`.
public enum WallClock {
    /// The current time: `clock_gettime(CLOCK_REALTIME)` plus `offset`.
    public static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9 + offset
    }

    private static let offsetBits = Atomic<UInt64>(Double(0).bitPattern)

    /// Seconds added to the system clock: the test seam for wall-clock jumps
    /// (the daemon sets it only from `TOKENVAULT_TEST_CLOCK_FILE`). 0 in production.
    public static var offset: Double {
        get { Double(bitPattern: offsetBits.load(ordering: .relaxed)) }
        set { offsetBits.store(newValue.bitPattern, ordering: .relaxed) }
    }

    /// RFC 3339 in UTC with whole seconds: `2026-11-29T14:30:00Z`.
    public static func rfc3339(_ seconds: Double) -> String {
        var t = time_t(seconds.rounded(.down))
        var tm = tm()
        gmtime_r(&t, &tm)
        func pad(_ v: Int32, _ n: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, n - s.count)) + s
        }
        return "\(pad(tm.tm_year + 1900, 4))-\(pad(tm.tm_mon + 1, 2))-\(pad(tm.tm_mday, 2))T\(pad(tm.tm_hour, 2)):\(pad(tm.tm_min, 2)):\(pad(tm.tm_sec, 2))Z"
    }
}
