@preconcurrency import Glibc
import Foundation

/// A Unix stream socket driven by hand with Glibc calls, independent of the
/// code under test, to send the daemon what a real client never would.
final class RawSocket {
    let fd: Int32

    /// Connects to `path` (`socket`, `connect`), close-on-exec so that the
    /// programs a test starts do not inherit it.
    init(path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            close(fd)
            throw HarnessError("socket path \(path) is longer than sun_path")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: bytes) }
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard r == 0 else {
            let e = errno
            close(fd)
            throw HarnessError("connect \(path): \(String(cString: strerror(e)))")
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Sends all of `bytes` (`MSG_NOSIGNAL`); false once the daemon has closed the connection.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            sent += n
        }
        return true
    }

    enum ReadOutcome: Equatable {
        case data([UInt8])
        /// End of stream, or the connection was reset.
        case closed
        case timedOut
    }

    /// Waits at most `timeout` for bytes or the end of the stream.
    func read(timeout: Duration) -> ReadOutcome {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ms = max(0, Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        let r = poll(&p, 1, ms)
        if r == 0 || (r < 0 && errno == EINTR) { return .timedOut }
        if r < 0 { return .closed }
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        return n > 0 ? .data(Array(buffer[0..<n])) : .closed
    }

    /// Everything received until the daemon closes the connection, or nil if
    /// it is still open after `timeout`.
    func readUntilClosed(timeout: Duration) -> [UInt8]? {
        let deadline = ContinuousClock.now + timeout
        var all: [UInt8] = []
        while true {
            let left = deadline - ContinuousClock.now
            if left <= .zero { return nil }
            switch read(timeout: left) {
            case .data(let d): all += d
            case .closed: return all
            case .timedOut: continue
            }
        }
    }

    /// Bytes received by `readFrame` beyond the frame it returned.
    private var pending: [UInt8] = []

    /// One response frame, parsed; nil if none came within `timeout` or the connection closed.
    func readFrame(timeout: Duration) throws -> [String: Any]? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if pending.count >= 4 {
                let n = Int(pending[0]) << 24 | Int(pending[1]) << 16 | Int(pending[2]) << 8 | Int(pending[3])
                if pending.count >= 4 + n {
                    let frame = Array(pending[0..<(4 + n)])
                    pending.removeFirst(4 + n)
                    return try Self.decodeFrames(frame).first
                }
            }
            let left = deadline - ContinuousClock.now
            if left <= .zero { return nil }
            switch read(timeout: left) {
            case .data(let d): pending += d
            case .closed: return nil
            case .timedOut: continue
            }
        }
    }

    // MARK: - Frames (4-byte big-endian length, then JSON)

    static func frame(_ payload: [UInt8]) -> [UInt8] {
        let n = UInt32(payload.count)
        return [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + payload
    }

    static func frame(_ json: String) -> [UInt8] { frame(Array(json.utf8)) }

    /// The hello every connection must start with.
    static let hello = frame(#"{"id":0,"op":"hello","protocol":1}"#)

    /// The JSON objects of the complete frames in `bytes`.
    static func decodeFrames(_ bytes: [UInt8]) throws -> [[String: Any]] {
        var out: [[String: Any]] = []
        var i = 0
        while bytes.count - i >= 4 {
            let n = Int(bytes[i]) << 24 | Int(bytes[i + 1]) << 16 | Int(bytes[i + 2]) << 8 | Int(bytes[i + 3])
            guard bytes.count - i - 4 >= n else { throw HarnessError("truncated frame from the daemon") }
            let object = try JSONSerialization.jsonObject(with: Data(bytes[(i + 4)..<(i + 4 + n)]))
            guard let o = object as? [String: Any] else { throw HarnessError("the daemon sent a frame that is not a JSON object") }
            out.append(o)
            i += 4 + n
        }
        guard i == bytes.count else { throw HarnessError("trailing bytes after the daemon's frames") }
        return out
    }

    /// The `error.code` of a response object.
    static func errorCode(_ response: [String: Any]?) -> String? {
        (response?["error"] as? [String: Any])?["code"] as? String
    }
}
