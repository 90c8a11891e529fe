@preconcurrency import Glibc
import Foundation
import Synchronization
import Testing

/// The test OAuth server (Tests/OAuthServer/server.py, Authlib) as a child
/// process on 127.0.0.1 with an ephemeral port, shared by the tests of one
/// test process: starting Python and Flask costs about a second, and the
/// login tests run serialized and reset it (`reset_all`) before each test.
///
/// `--watch-parent` makes it exit with the test process, `--max-lifetime`
/// is the safety net.
final class SharedOAuthServer: @unchecked Sendable {  // every property is a `let` set in init; `process` is only reaped under `shared`'s lock
    /// The base URL from its READY line; also the issuer.
    let base: String
    private let process: ChildProcess

    private static let shared = Mutex<SharedOAuthServer?>(nil)

    /// The running shared server, started (and its venv created) on first use.
    static func running() throws -> SharedOAuthServer {
        try shared.withLock { s in
            if let s, s.process.isRunning { return s }
            let new = try SharedOAuthServer()
            s = new
            return new
        }
    }

    private init() throws {
        let folder = FileManager.default.temporaryDirectory.path + "/tvoauth-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let environment = ProcessInfo.processInfo.environment

        // The venv (created once, then only checked): its python is the last line.
        let venv = try ChildProcess("/bin/bash", [PackagePaths.root + "/scripts/oauth-server-venv.sh"], environment: environment,
                                    stdinPath: nil, stdoutPath: folder + "/venv.out", stderrPath: folder + "/venv.err")
        let venvStatus = try venv.wait(timeout: .seconds(600), what: "scripts/oauth-server-venv.sh")
        let venvOut = (try? String(contentsOfFile: folder + "/venv.out", encoding: .utf8)) ?? ""
        guard venvStatus == 0, let python = venvOut.split(separator: "\n").last.map(String.init), !python.isEmpty else {
            let err = (try? String(contentsOfFile: folder + "/venv.err", encoding: .utf8)) ?? ""
            throw HarnessError("scripts/oauth-server-venv.sh failed (\(venvStatus)): \(err)")
        }

        // The server's output files are unlinked with the folder once it is ready; it keeps writing to them.
        let out = folder + "/server.out"
        let p = try ChildProcess(python, [PackagePaths.root + "/Tests/OAuthServer/server.py", "--port", "0", "--quiet",
                                          "--watch-parent", "--max-lifetime", "1800"],
                                 environment: environment, stdinPath: nil, stdoutPath: out, stderrPath: folder + "/server.err")
        var ready: String?
        try waitFor("the test OAuth server's READY line", timeout: .seconds(30)) {
            let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("READY ") }) {
                ready = String(line.dropFirst(6))
                return true
            }
            guard p.isRunning else {
                let err = (try? String(contentsOfFile: folder + "/server.err", encoding: .utf8)) ?? ""
                throw HarnessError("the test OAuth server exited with \(p.exitStatus ?? -1): \(err)")
            }
            return false
        }
        base = ready!
        process = p
    }

    /// `POST /_control` with `settings` (knobs, failures, actions); fails unless 200.
    @discardableResult
    func control(_ settings: [String: Any]) throws -> [String: Any] {
        let body = try JSONSerialization.data(withJSONObject: settings)
        let r = try LoopbackHTTP.request("POST", base + "/_control", body: body, contentType: "application/json")
        guard r.status == 200 else { throw HarnessError("POST /_control \(settings): HTTP \(r.status) \(r.body)") }
        return try r.json()
    }

    /// `GET /_stats`.
    func stats() throws -> [String: Any] {
        let r = try LoopbackHTTP.request("GET", base + "/_stats")
        guard r.status == 200 else { throw HarnessError("GET /_stats: HTTP \(r.status)") }
        return try r.json()
    }

    /// `stats[key][sub]` as an integer, 0 when absent.
    static func count(_ stats: [String: Any], _ key: String, _ sub: String? = nil) -> Int {
        guard let sub else { return stats[key] as? Int ?? 0 }
        return (stats[key] as? [String: Any])?[sub] as? Int ?? 0
    }

    /// Whether `accessToken` is accepted by the server's protected resource (`/api/me`).
    func accepts(_ accessToken: String) throws -> Bool {
        try LoopbackHTTP.request("GET", base + "/api/me", headers: ["Authorization": "Bearer " + accessToken]).status == 200
    }
}

/// An HTTP/1.1 answer as the test client read it.
struct HTTPAnswer {
    let status: Int
    /// Header names in lower case.
    let headers: [String: String]
    let body: String

    func json() throws -> [String: Any] {
        guard let o = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] else {
            throw HarnessError("not a JSON object: \(body)")
        }
        return o
    }
}

/// A minimal HTTP/1.1 client for `http://127.0.0.1:PORT` URLs, on a plain
/// socket. It sends one request with `Connection: close` and reads to the
/// end; it never follows a redirect, so a test can look at `Location`
/// before it goes to the loopback listener, as a browser would.
enum LoopbackHTTP {
    static func request(_ method: String, _ url: String, headers: [String: String] = [:], body: Data? = nil,
                        contentType: String? = nil, timeoutSeconds: Int = 20) throws -> HTTPAnswer {
        guard let c = URLComponents(string: url), c.scheme == "http", c.host == "127.0.0.1", let port = c.port else {
            throw HarnessError("LoopbackHTTP takes http://127.0.0.1:PORT URLs, not \(url)")
        }
        let target = (c.percentEncodedPath.isEmpty ? "/" : c.percentEncodedPath) + (c.percentEncodedQuery.map { "?" + $0 } ?? "")
        let fd = connect(port: port)
        guard fd >= 0 else { throw HarnessError("connect 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))

        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\nUser-Agent: tokenvault-tests\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if let body {
            head += "Content-Type: \(contentType ?? "application/octet-stream")\r\nContent-Length: \(body.count)\r\n"
        }
        let bytes = Array((head + "\r\n").utf8) + Array(body ?? Data())
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw HarnessError("send to 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
            sent += n
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw HarnessError("read from 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            received += buffer[0..<n]
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw HarnessError("no HTTP answer from \(url): \(text.debugDescription)") }
        let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            throw HarnessError("bad status line from \(url): \(lines[0].debugDescription)")
        }
        var answerHeaders: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            answerHeaders[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return HTTPAnswer(status: status, headers: answerHeaders, body: String(text[split.upperBound...]))
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    static func isListening(port: Int) -> Bool {
        let fd = connect(port: port)
        if fd >= 0 { close(fd) }
        return fd >= 0
    }

    /// A connected socket, or -1 with errno set.
    private static func connect(port: Int) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if r != 0 {
            let saved = errno
            close(fd)
            errno = saved
            return -1
        }
        return fd
    }
}
