@preconcurrency import Glibc
import Synchronization

/// Log lines on standard error with journald priority prefixes (`<3>` …,
/// `sd-daemon(3)`), as systemd expects of a foreground service.
/// Callers never pass secrets: messages name providers, paths and errno.
public final class Logger: Sendable {
    /// Severity, most severe first; the raw value is the syslog priority.
    public enum Level: Int32, Sendable, Comparable {
        case error = 3, warning = 4, info = 6, debug = 7

        public init?(name: String) {
            switch name {
            case "error": self = .error
            case "warning": self = .warning
            case "info": self = .info
            case "debug": self = .debug
            default: return nil
            }
        }

        public static func < (a: Level, b: Level) -> Bool { a.rawValue > b.rawValue }
    }

    private let minimum: Atomic<Int32>

    public init(level: Level = .info) { minimum = Atomic(level.rawValue) }

    /// The least severe level still written.
    public var level: Level {
        get { Level(rawValue: minimum.load(ordering: .relaxed)) ?? .info }
        set { minimum.store(newValue.rawValue, ordering: .relaxed) }
    }

    /// Writes one line (a single `write(2)`, so lines from threads do not interleave).
    public func log(_ level: Level, _ message: @autoclosure () -> String) {
        guard level >= self.level else { return }
        var line = "<\(level.rawValue)>" + message()
        line = String(line.map { $0 == "\n" ? " " : $0 })
        line += "\n"
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
    }

    public func error(_ m: @autoclosure () -> String) { log(.error, m()) }
    public func warning(_ m: @autoclosure () -> String) { log(.warning, m()) }
    public func info(_ m: @autoclosure () -> String) { log(.info, m()) }
    public func debug(_ m: @autoclosure () -> String) { log(.debug, m()) }
}
