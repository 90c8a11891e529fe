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

    /// RFC 3339 in UTC with whole seconds: `2026-11-29T14:30:00Z` (`gmtime_r`).
    public static func rfc3339(_ seconds: Double) -> String {
        var t = time_t(seconds.rounded(.down))
        var tm = tm()
        gmtime_r(&t, &tm)
        var out = [UInt8](repeating: 0, count: 20)
        func put(_ v: Int32, _ at: Int, _ width: Int) {
            var v = v
            for i in stride(from: at + width - 1, through: at, by: -1) {
                out[i] = UInt8(48 + v % 10)
                v /= 10
            }
        }
        put(tm.tm_year + 1900, 0, 4)
        out[4] = UInt8(ascii: "-")
        put(tm.tm_mon + 1, 5, 2)
        out[7] = UInt8(ascii: "-")
        put(tm.tm_mday, 8, 2)
        out[10] = UInt8(ascii: "T")
        put(tm.tm_hour, 11, 2)
        out[13] = UInt8(ascii: ":")
        put(tm.tm_min, 14, 2)
        out[16] = UInt8(ascii: ":")
        put(tm.tm_sec, 17, 2)
        out[19] = UInt8(ascii: "Z")
        return String(decoding: out, as: UTF8.self)
    }
}
