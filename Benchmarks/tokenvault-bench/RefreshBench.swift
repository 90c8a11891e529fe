// Refresh-engine benchmarks (docs/performance.md "Refresh engine"): the idle
// cost of many scheduled items, refresh throughput against the test OAuth
// server (Tests/OAuthServer), and single flight under 1,000 concurrent requests.
@preconcurrency import Glibc
import Foundation
import Synchronization
import TokenVaultClient
import VaultModel
import VaultProtocol
import VaultStore
import VaultSystem

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// One HTTP/1.1 request to 127.0.0.1 (`Connection: close`, no redirects
/// followed): enough for the test OAuth server, independent of URLSession.
func loopbackHTTP(port: UInt16, _ method: String, _ path: String, headers: [(String, String)] = [],
                  body: String? = nil) throws -> (status: Int, headers: [String: String], body: [UInt8]) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw BenchError("socket: \(errno)") }
    defer { close(fd) }
    var tv = timeval(tv_sec: 60, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    let r = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard r == 0 else { throw BenchError("connect 127.0.0.1:\(port): errno \(errno)") }
    let payload = Array((body ?? "").utf8)
    var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
    for (k, v) in headers { head += "\(k): \(v)\r\n" }
    if body != nil { head += "Content-Length: \(payload.count)\r\n" }
    let out = Array((head + "\r\n").utf8) + payload
    var sent = 0
    while sent < out.count {
        let n = out.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
        guard n > 0 else { throw BenchError("send: errno \(errno)") }
        sent += n
    }
    var raw: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0 && errno == EINTR { continue }
        guard n >= 0 else { throw BenchError("recv: errno \(errno)") }
        if n == 0 { break }
        raw += buf[0..<n]
    }
    guard let end = (0..<max(0, raw.count - 3)).first(where: { raw[$0] == 13 && raw[$0 + 1] == 10 && raw[$0 + 2] == 13 && raw[$0 + 3] == 10 }) else {
        throw BenchError("HTTP answer without headers")
    }
    let lines = String(decoding: raw[0..<end], as: UTF8.self).components(separatedBy: "\r\n")
    let status = lines[0].split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
    var h: [String: String] = [:]
    for line in lines.dropFirst() {
        if let c = line.firstIndex(of: ":") { h[line[..<c].lowercased()] = line[line.index(after: c)...].trimmingCharacters(in: .whitespaces) }
    }
    return (status, h, Array(raw[(end + 4)...]))
}

func formBody(_ pairs: [(String, String)]) -> String {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._~")
    return pairs.map { "\($0.0.addingPercentEncoding(withAllowedCharacters: allowed)!)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed)!)" }
        .joined(separator: "&")
}

/// The test OAuth server at `base` (`http://127.0.0.1:PORT`).
struct TestOAuthServer {
    let port: UInt16
    static let verifier = "tokenvault-e2e-refresh-tests-pkce-verifier-0123456789abcdefghij"
    /// BASE64URL(SHA256(verifier)), RFC 7636 section 4.2.
    static let challenge = "zx4j9sIWABv1UnElbVa5OJUM1LituV6RbIlFaMuX1xw"
    static let redirect = "http://127.0.0.1:53127/callback"

    init(base: String) throws {
        guard let p = base.split(separator: ":").last.flatMap({ UInt16($0) }) else { throw BenchError("bad base URL \(base)") }
        port = p
    }

    func control(_ json: String) throws {
        let r = try loopbackHTTP(port: port, "POST", "/_control", headers: [("Content-Type", "application/json")], body: json)
        guard r.status == 200 else { throw BenchError("POST /_control \(json): HTTP \(r.status)") }
    }

    func stats() throws -> [String: Any] {
        let r = try loopbackHTTP(port: port, "GET", "/_stats")
        guard r.status == 200, let o = try JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any] else { throw BenchError("GET /_stats") }
        return o
    }

    /// Authorization code + PKCE for public-cli; the token response body.
    func authorizationCode() throws -> [UInt8] {
        let q = formBody([("response_type", "code"), ("client_id", "public-cli"), ("redirect_uri", Self.redirect), ("state", "b"),
                          ("code_challenge", Self.challenge), ("code_challenge_method", "S256")])
        let a = try loopbackHTTP(port: port, "GET", "/authorize?" + q)
        guard a.status == 302, let loc = a.headers["location"], let code = URLComponents(string: loc)?.queryItems?.first(where: { $0.name == "code" })?.value else {
            throw BenchError("GET /authorize: HTTP \(a.status)")
        }
        let t = try loopbackHTTP(port: port, "POST", "/token", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                                 body: formBody([("grant_type", "authorization_code"), ("code", code), ("redirect_uri", Self.redirect),
                                                 ("client_id", "public-cli"), ("code_verifier", Self.verifier)]))
        guard t.status == 200 else { throw BenchError("POST /token: HTTP \(t.status)") }
        return t.body
    }

    /// One refresh grant; the HTTP status.
    func refresh(_ refreshToken: String) throws -> Int {
        try loopbackHTTP(port: port, "POST", "/token", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                         body: formBody([("grant_type", "refresh_token"), ("refresh_token", refreshToken), ("client_id", "public-cli")])).status
    }
}

// MARK: - Idle

/// A vault of `count` items of `provider` whose lifetimes are spread evenly
/// over `minLife`…`maxLife` seconds from now (the refresh tokens are made
/// up: nothing is due during the idle measurement).
func populateStaggered(folder: String, count: Int, provider: String, minLife: Double, maxLife: Double) throws {
    let store = try SQLiteStore(path: folder + "/vault.db")
    let vault = try Vault(store: store, keyFiles: KeyFiles(folder: folder), machineID: try MachineIdentity.read())
    let now = WallClock.now()
    let batch = (0..<count).map { i in
        let life = minLife + (maxLife - minLife) * Double(i) / Double(max(1, count - 1))
        return Vault.NewItem(key: ItemKey(provider: provider, account: "acct\(i)"), mode: .afterFirstUnlock, secrets: tokenJSON(i), expiresAt: now + life)
    }
    try vault.putBatch(batch)
    try store.checkpoint()
}

/// What /proc says about a process: CPU ticks, context switches of all its threads, RSS.
struct ProcSample {
    var cpuTicks = 0
    var voluntary = 0
    var involuntary = 0
    var threads: [String: (name: String, voluntary: Int, involuntary: Int)] = [:]
    var rssKB = 0

    init(pid: Int32) throws {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        guard let close = stat.lastIndex(of: ")") else { throw BenchError("/proc/\(pid)/stat") }
        let f = stat[stat.index(after: close)...].split(separator: " ")
        cpuTicks = Int(f[11])! + Int(f[12])!  // utime, stime (fields 14 and 15)
        for line in try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8).split(separator: "\n") where line.hasPrefix("VmRSS:") {
            rssKB = Int(line.split(separator: " ")[1]) ?? 0
        }
        for tid in try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") {
            guard let s = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/status", encoding: .utf8) else { continue }
            var v = 0, n = 0
            for line in s.split(separator: "\n") {
                if line.hasPrefix("voluntary_ctxt_switches:") { v = Int(line.split(separator: "\t").last!.trimmingCharacters(in: .whitespaces)) ?? 0 }
                if line.hasPrefix("nonvoluntary_ctxt_switches:") { n = Int(line.split(separator: "\t").last!.trimmingCharacters(in: .whitespaces)) ?? 0 }
            }
            let name = ((try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .whitespacesAndNewlines)
            threads[tid] = (name, v, n)
            voluntary += v
            involuntary += n
        }
    }
}

/// Samples `pid` before and after `seconds` of idleness.
func idle(pid: Int32, seconds: Double) throws {
    let before = try ProcSample(pid: pid)
    let t = now()
    usleep(UInt32(seconds * 1e6))
    let after = try ProcSample(pid: pid)
    let elapsed = now() - t
    let hz = Double(sysconf(Int32(_SC_CLK_TCK)))
    report("idle_seconds", String(format: "%.1f", elapsed))
    report("idle_threads", "\(after.threads.count)")
    report("idle_rss_kb", "\(after.rssKB)")
    report("idle_cpu_ms", String(format: "%.0f", Double(after.cpuTicks - before.cpuTicks) / hz * 1000))
    // Per thread, so a thread that ended during the sample (a closed client
    // connection) does not subtract its earlier switches from the total.
    var voluntary = 0, involuntary = 0
    for (tid, a) in after.threads {
        let b = before.threads[tid] ?? (a.name, 0, 0)
        voluntary += a.voluntary - b.voluntary
        involuntary += a.involuntary - b.involuntary
    }
    report("idle_wakeups_voluntary", "\(voluntary)")
    report("idle_wakeups_involuntary", "\(involuntary)")
    report("idle_threads_ended", "\(before.threads.keys.filter { after.threads[$0] == nil }.count)")
    for (tid, a) in after.threads.sorted(by: { $0.key < $1.key }) {
        let b = before.threads[tid] ?? (a.name, 0, 0)
        if a.voluntary != b.voluntary || a.involuntary != b.involuntary {
            report("idle_thread_\(tid)_\(a.name)", "\(a.voluntary - b.voluntary) voluntary, \(a.involuntary - b.involuntary) involuntary")
        }
    }
}

// MARK: - Refresh throughput

/// `count` items due at the same instant (one wall-clock jump through the
/// daemon's test seam, TOKENVAULT_TEST_CLOCK_FILE + SIGUSR1), against the
/// test server; beside it, the same number of refresh grants sent straight
/// to the server by 8 threads (the daemon's number of refresh workers).
func refreshRate(socket: String, base: String, count: Int, pid: Int32, clockFile: String) throws {
    let server = try TestOAuthServer(base: base)
    try server.control(#"{"reset_all": true}"#)
    var t = now()
    var responses: [[UInt8]] = []
    for _ in 0..<(2 * count) { responses.append(try server.authorizationCode()) }
    report("refresh_auth_code_grants_per_s", String(format: "%.0f (the test server, sequential)", Double(2 * count) / (now() - t)))

    // Reference: the server's own rate for refresh grants, 8 at a time.
    let direct = responses[0..<count].map { (try? JSON.parse($0))?["refresh_token"]?.stringValue ?? "" }
    let next = Atomic<Int>(0), bad = Atomic<Int>(0)
    let group = DispatchGroup()
    t = now()
    for _ in 0..<8 {
        group.enter()
        try spawnThread {
            while true {
                let i = next.add(1, ordering: .relaxed).oldValue
                if i >= direct.count { break }
                if (try? server.refresh(direct[i])) != 200 { bad.add(1, ordering: .relaxed) }
            }
            group.leave()
        }
    }
    group.wait()
    let directRate = Double(count) / (now() - t)
    report("refresh_direct_8_threads_per_s", String(format: "%.0f (%d failed)", directRate, bad.load(ordering: .relaxed)))

    // The daemon: add the other half (one hour each), then make them all due at once.
    let client = TokenVaultClient(socketPath: socket)
    for (i, body) in responses[count...].enumerated() {
        _ = try client.raw(.add, [("provider", "bench"), ("account", .string("r\(i)")), ("token_response", try JSON.parse(body))])
    }
    try server.control(#"{"reset": true}"#)
    try "3500\n".write(toFile: clockFile, atomically: true, encoding: .utf8)
    t = now()
    kill(pid, SIGUSR1)
    var stats: [String: Any] = [:]
    while true {
        stats = try server.stats()
        if (stats["refresh_success"] as? Int ?? 0) >= count { break }
        if now() - t > 300 { throw BenchError("only \(stats["refresh_success"] ?? 0) of \(count) refreshed after 300 s") }
        usleep(5_000)
    }
    let elapsed = now() - t
    let log = (stats["token_log"] as? [[String: Any]] ?? []).filter { $0["grant_type"] as? String == "refresh_token" }
    let durations = log.compactMap { $0["duration"] as? Double }.sorted()
    report("refresh_daemon_items", "\(count) due at once")
    report("refresh_daemon_all_done_s", String(format: "%.2f", elapsed))
    report("refresh_daemon_per_s", String(format: "%.0f (direct reference %.0f)", Double(count) / elapsed, directRate))
    report("refresh_server_max_concurrent", "\(stats["max_concurrent_token_requests"] ?? "?")")
    if !durations.isEmpty {
        report("refresh_server_duration_ms_p50", String(format: "%.1f", percentile(durations, 0.5) * 1000))
    }
    report("refresh_reuse_detected", "\(stats["refresh_reuse_detected"] ?? "?") (replayed \(stats["refresh_replayed"] ?? "?"))")
    let valid = try client.list().filter { $0.provider == "bench" && $0.state == .valid }.count
    report("refresh_items_valid_after", "\(valid)")
}

// MARK: - Single flight

/// `connections` clients, one thread and one connection each, all asking at
/// the same moment for one item's token with more validity than it has
/// left: how many token-endpoint requests, and how long the requests waited.
/// Then, as the reference, the same clients all asking at once for the
/// (now fresh) token: the cost of 1,000 concurrent requests without a refresh.
func singleFlight(socket: String, base: String, connections: Int, slow: Double) throws {
    let server = try TestOAuthServer(base: base)
    let account = "sf\(Int(slow * 1000))"
    let client = TokenVaultClient(socketPath: socket)
    _ = try client.raw(.add, [("provider", "bench"), ("account", .string(account)), ("token_response", try JSON.parse(try server.authorizationCode()))])
    if slow > 0 { try server.control(#"{"fail": {"kind": "slow", "seconds": \#(slow), "grant_type": "refresh_token"}}"#) }
    let before = try server.stats()["refresh_requests"] as? Int ?? 0

    let latencies = Mutex<[Double]>([])
    let reference = Mutex<[Double]>([])
    let tokens = Mutex<Set<String>>([])
    let failed = Atomic<Int>(0)
    let connected = DispatchGroup(), go = DispatchGroup(), done = DispatchGroup()
    let go2 = DispatchGroup(), done2 = DispatchGroup()
    go.enter()
    go2.enter()
    for _ in 0..<connections {
        connected.enter()
        done.enter()
        done2.enter()
        try spawnThread {
            let c = TokenVaultClient(socketPath: socket, timeout: 60)
            _ = try? c.status()
            connected.leave()
            go.wait()
            let t = now()
            do {
                // The token was issued for 3600 s more than 5 s ago: 3595 s of validity needs a refresh.
                let tok = try c.token(provider: "bench", account: account, minValidity: 3595)
                latencies.withLock { $0.append(now() - t) }
                tokens.withLock { _ = $0.insert(tok.accessToken) }
            } catch {
                failed.add(1, ordering: .relaxed)
            }
            done.leave()
            go2.wait()
            let t2 = now()
            if (try? c.token(provider: "bench", account: account)) != nil {
                reference.withLock { $0.append(now() - t2) }
            } else {
                failed.add(1, ordering: .relaxed)
            }
            done2.leave()
        }
    }
    connected.wait()
    // Let the token age past 3595 s of validity left.
    usleep(5_500_000)
    go.leave()
    done.wait()
    go2.leave()
    done2.wait()
    let after = try server.stats()["refresh_requests"] as? Int ?? 0
    let l = latencies.withLock { $0 }.sorted()
    let label = slow > 0 ? "single_flight_slow\(Int(slow * 1000))ms" : "single_flight"
    report(label + "_requests", "\(connections) concurrent, \(failed.load(ordering: .relaxed)) failed, \(tokens.withLock { $0.count }) distinct token(s)")
    report(label + "_token_endpoint_requests", "\(after - before)")
    if !l.isEmpty {
        report(label + "_latency_ms", String(format: "p50 %.1f, p99 %.1f, max %.1f", percentile(l, 0.5) * 1000, percentile(l, 0.99) * 1000, l.last! * 1000))
    }
    let r = reference.withLock { $0 }.sorted()
    if !r.isEmpty {
        report(label + "_reference_no_refresh_latency_ms", String(format: "p50 %.1f, p99 %.1f, max %.1f (the same %d clients at once, token fresh)",
                                                                 percentile(r, 0.5) * 1000, percentile(r, 0.99) * 1000, r.last! * 1000, r.count))
    }
}
