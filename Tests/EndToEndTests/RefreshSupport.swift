@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient

/// A minimal HTTP/1.1 client on a TCP socket, independent of the code under
/// test (which uses `URLSession`): one request per connection
/// (`Connection: close`), no redirect following, so a test can read the
/// `Location` of the authorization endpoint's 302.
enum HTTP {
    struct Response: CustomStringConvertible {
        let status: Int
        /// Header names lowercased.
        let headers: [String: String]
        let body: Data
        var text: String { String(decoding: body, as: UTF8.self) }
        /// The body as a JSON object, or nil.
        var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] }
        var description: String { "HTTP \(status) \(text.prefix(300).debugDescription)" }
    }

    /// `application/x-www-form-urlencoded` (RFC 6749 appendix B).
    static func form(_ pairs: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        func enc(_ s: String) -> String { s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s }
        return pairs.map { enc($0.0) + "=" + enc($0.1) }.joined(separator: "&")
    }

    /// Sends one request to `127.0.0.1:port` and reads the answer until the server closes.
    static func request(port: UInt16, _ method: String, _ path: String, headers: [(String, String)] = [],
                        body: String? = nil, timeout: Int = 30) throws -> Response {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var tv = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard r == 0 else { throw HarnessError("connect 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
        let bodyBytes = Array((body ?? "").utf8)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if body != nil { head += "Content-Length: \(bodyBytes.count)\r\n" }
        head += "\r\n"
        let out = Array(head.utf8) + bodyBytes
        var sent = 0
        while sent < out.count {
            let n = out.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw HarnessError("send to 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
            sent += n
        }
        var raw: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw HarnessError("recv from 127.0.0.1:\(port): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            raw += buffer[0..<n]
        }
        return try parse(raw)
    }

    static func parse(_ raw: [UInt8]) throws -> Response {
        let crlf2: [UInt8] = [13, 10, 13, 10]
        guard let split = (0..<max(0, raw.count - 3)).first(where: { Array(raw[$0..<($0 + 4)]) == crlf2 }) else {
            throw HarnessError("HTTP answer without a header end (\(raw.count) bytes)")
        }
        let lines = String(decoding: raw[0..<split], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = lines[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw HarnessError("bad status line \(lines[0].debugDescription)") }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Array(raw[(split + 4)...])
        if headers["transfer-encoding"]?.lowercased() == "chunked" {
            var decoded: [UInt8] = []
            var i = 0
            while let lineEnd = (i..<max(i, body.count - 1)).first(where: { body[$0] == 13 && body[$0 + 1] == 10 }),
                  let size = Int(String(decoding: body[i..<lineEnd], as: UTF8.self).split(separator: ";")[0], radix: 16), size > 0 {
                decoded += body[(lineEnd + 2)..<min(body.count, lineEnd + 2 + size)]
                i = lineEnd + 2 + size + 2
            }
            body = decoded
        }
        return Response(status: status, headers: headers, body: Data(body))
    }
}

/// The test OAuth 2.0 server (Tests/OAuthServer/server.py, on Authlib) as a
/// child process of the test, on an ephemeral loopback port. Stopped with
/// SIGTERM by `stop()`; `--watch-parent` and `--max-lifetime` end it if a
/// test crashes first.
final class OAuthTestServer {
    let process: ChildProcess
    /// `http://127.0.0.1:PORT`: the issuer, and the base of every endpoint.
    let base: String
    let port: UInt16
    private let logPath: String

    static let python = PackagePaths.root + "/.venv-oauth/bin/python"
    static let script = PackagePaths.root + "/Tests/OAuthServer/server.py"

    /// Public PKCE pair: `challenge = BASE64URL(SHA256(verifier))` (RFC 7636
    /// section 4.2), computed once; a fixed verifier is enough for a test server.
    static let pkceVerifier = "tokenvault-e2e-refresh-tests-pkce-verifier-0123456789abcdefghij"
    static let pkceChallenge = "zx4j9sIWABv1UnElbVa5OJUM1LituV6RbIlFaMuX1xw"
    /// Any port: the server ignores it for loopback redirect URIs (RFC 8252 section 7.3).
    static let redirectURI = "http://127.0.0.1:53127/callback"

    /// Starts the server with its output in `folder` and waits for its READY line.
    init(folder: String, settings: [String: Any] = [:]) throws {
        guard FileManager.default.isExecutableFile(atPath: Self.python) else {
            throw HarnessError("\(Self.python) is missing: run `bash scripts/oauth-server-venv.sh` first")
        }
        let out = folder + "/oauth-server.out"
        logPath = folder + "/oauth-server.log"
        process = try ChildProcess(Self.python, [Self.script, "--port", "0", "--quiet", "--watch-parent", "--max-lifetime", "600"],
                                   environment: ProcessInfo.processInfo.environment, stdinPath: nil, stdoutPath: out, stderrPath: logPath)
        var line = ""
        let p = process
        let log = logPath
        try waitFor("the OAuth server's READY line", timeout: .seconds(30)) {
            guard p.isRunning else {
                throw HarnessError("the OAuth server exited with \(p.exitStatus ?? -1): \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            }
            line = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            return line.hasSuffix("\n")
        }
        let parts = line.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: " ")
        guard parts.count == 2, parts[0] == "READY", let port = parts[1].split(separator: ":").last.flatMap({ UInt16($0) }) else {
            throw HarnessError("unexpected first line from the OAuth server: \(line.debugDescription)")
        }
        base = String(parts[1])
        self.port = port
        if !settings.isEmpty { try control(settings) }
    }

    /// SIGTERM, then waits for exit status 0.
    func stop(sourceLocation: SourceLocation = #_sourceLocation) {
        guard process.isRunning else { return }
        kill(process.pid, SIGTERM)
        let status = try? process.wait(timeout: .seconds(10), what: "the OAuth server to exit after SIGTERM")
        #expect(status == 0, "the OAuth server should exit 0 after SIGTERM", sourceLocation: sourceLocation)
    }

    /// The provider config for this server: discovery from the issuer.
    func provider(clientID: String = "public-cli", _ extra: [String: Any] = [:]) -> [String: Any] {
        ["issuer": base, "client_id": clientID].merging(extra) { $1 }
    }

    // MARK: - /_control and /_stats

    /// POST /_control: knobs, failures, actions (README "/_control").
    @discardableResult
    func control(_ body: [String: Any], sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
        let data = try JSONSerialization.data(withJSONObject: body)
        let r = try HTTP.request(port: port, "POST", "/_control", headers: [("Content-Type", "application/json")],
                                 body: String(decoding: data, as: UTF8.self))
        try #require(r.status == 200, "POST /_control \(body): \(r)", sourceLocation: sourceLocation)
        return r.json ?? [:]
    }

    /// Appends injected failures.
    func inject(_ failures: [String: Any]...) throws { try control(["fail": failures]) }

    /// GET /_stats.
    func stats() throws -> Stats {
        let r = try HTTP.request(port: port, "GET", "/_stats")
        guard r.status == 200, let json = r.json else { throw HarnessError("GET /_stats: \(r)") }
        return Stats(json: json)
    }

    /// The counters of `/_stats` that the tests read.
    struct Stats: CustomStringConvertible {
        let json: [String: Any]
        func int(_ key: String) -> Int { json[key] as? Int ?? 0 }
        func int(_ key: String, _ sub: String) -> Int { (json[key] as? [String: Any])?[sub] as? Int ?? 0 }
        var refreshRequests: Int { int("refresh_requests") }
        var refreshSuccess: Int { int("refresh_success") }
        var reuseDetected: Int { int("refresh_reuse_detected") }
        var replayed: Int { int("refresh_replayed") }
        var tokenLog: [[String: Any]] { json["token_log"] as? [[String: Any]] ?? [] }
        /// The token log's entries of one grant type, oldest first.
        func log(_ grant: String) -> [[String: Any]] { tokenLog.filter { $0["grant_type"] as? String == grant } }
        var description: String {
            let log = tokenLog.map { e in
                "\(e["grant_type"] ?? "?")@\(String(format: "%.3f", e["t"] as? Double ?? 0)) status \(e["status"] ?? "nil") \(e["injected"] as? String ?? "")"
            }
            return "refresh_requests \(refreshRequests), refresh_success \(refreshSuccess), reuse \(reuseDetected), replayed \(replayed), " +
                "revocations \(json["revocations"] ?? "?"), token_log [\(log.joined(separator: "; "))]"
        }
    }

    // MARK: - Grants, done by the test itself

    /// The authorization code grant with PKCE (RFC 6749 section 4.1, RFC 7636):
    /// GET /authorize without following the redirect, `code` from the
    /// Location, then POST /token. Returns the token response's JSON text.
    /// A confidential client (`secret`) authenticates with HTTP Basic.
    func authorizationCode(clientID: String = "public-cli", secret: String? = nil, scope: String = "read write") throws -> TokenGrant {
        let query = HTTP.form([("response_type", "code"), ("client_id", clientID), ("redirect_uri", Self.redirectURI),
                               ("scope", scope), ("state", "st-e2e"), ("code_challenge", Self.pkceChallenge),
                               ("code_challenge_method", "S256")])
        let authz = try HTTP.request(port: port, "GET", "/authorize?" + query)
        guard authz.status == 302, let location = authz.headers["location"], let url = URLComponents(string: location),
              let code = url.queryItems?.first(where: { $0.name == "code" })?.value else {
            throw HarnessError("GET /authorize did not redirect with a code: \(authz) \(authz.headers)")
        }
        guard url.queryItems?.first(where: { $0.name == "state" })?.value == "st-e2e" else { throw HarnessError("the state came back changed: \(location)") }
        var form = [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", Self.redirectURI),
                    ("code_verifier", Self.pkceVerifier)]
        if secret == nil { form.append(("client_id", clientID)) }
        return try tokenRequest(form, clientID: clientID, secret: secret)
    }

    /// The client credentials grant (RFC 6749 section 4.4), HTTP Basic.
    func clientCredentials(clientID: String = "cc-cli", secret: String = "cc-secret") throws -> TokenGrant {
        try tokenRequest([("grant_type", "client_credentials")], clientID: clientID, secret: secret)
    }

    private func tokenRequest(_ form: [(String, String)], clientID: String, secret: String?) throws -> TokenGrant {
        var headers = [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")]
        if let secret { headers.append(("Authorization", "Basic " + Data("\(clientID):\(secret)".utf8).base64EncodedString())) }
        let r = try HTTP.request(port: port, "POST", "/token", headers: headers, body: HTTP.form(form))
        guard r.status == 200, let json = r.json, let access = json["access_token"] as? String else {
            throw HarnessError("POST /token (\(form.first?.1 ?? "?")): \(r)")
        }
        return TokenGrant(json: r.text, accessToken: access, refreshToken: json["refresh_token"] as? String,
                          expiresIn: json["expires_in"] as? Int, scope: json["scope"] as? String)
    }

    /// GET /api/me with `Authorization: Bearer TOKEN`: the HTTP status (200 or 401).
    func apiMe(_ accessToken: String) throws -> Int {
        try HTTP.request(port: port, "GET", "/api/me", headers: [("Authorization", "Bearer " + accessToken)]).status
    }
}

/// A token response obtained by the test from the server.
struct TokenGrant {
    /// The response body as sent, for `vaultctl add` on standard input.
    let json: String
    let accessToken: String
    let refreshToken: String?
    let expiresIn: Int?
    let scope: String?
}

extension DaemonHarness {
    /// `$XDG_CONFIG_HOME/tokenvault/config.json`, the daemon's default config path.

    /// Writes the daemon's config file (0600) from a JSON object.
    func writeConfig(_ config: [String: Any]) throws {
        try writeConfigText(String(decoding: try JSONSerialization.data(withJSONObject: config, options: [.sortedKeys]), as: UTF8.self))
    }

    /// Writes the daemon's config file (0600) as given, valid or not.
    func writeConfigText(_ text: String) throws {
        try FileManager.default.createDirectory(atPath: configHome + "/tokenvault", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        guard FileManager.default.createFile(atPath: configPath + ".tmp", contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]),
              rename(configPath + ".tmp", configPath) == 0 else {
            throw HarnessError("cannot write \(configPath)")
        }
    }

    /// Remembers a grant's tokens as secrets and adds it with `vaultctl add PROVIDER` (JSON on stdin).
    func add(_ grant: TokenGrant, provider: String = "test", account: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws {
        remember(grant.accessToken)
        if let rt = grant.refreshToken { remember(rt) }
        let r = try vaultctl(["add", provider] + (account.map { ["--account", $0] } ?? []), stdin: grant.json)
        try #require(r.status == 0, "vaultctl add \(provider): \(r)", sourceLocation: sourceLocation)
    }

    /// The `list --json` entry of `provider`.
    func listed(_ provider: String = "test") throws -> [String: Any]? {
        try listJSON().first { $0["provider"] as? String == provider }
    }
}

/// One refresh test's world: a private vault, its own OAuth server, and a
/// daemon whose config has the provider `test` pointing at that server.
final class RefreshFixture {
    let h: DaemonHarness
    let server: OAuthTestServer

    /// `provider` is merged into `{"issuer": BASE, "client_id": clientID}`;
    /// `settings` are the server's knobs.
    init(settings: [String: Any] = [:], clientID: String = "public-cli", provider: [String: Any] = [:],
         daemonEnvironment: [String: String] = [:], start: Bool = true) throws {
        h = try DaemonHarness(daemonEnvironment: daemonEnvironment)
        server = try OAuthTestServer(folder: h.folder, settings: settings)
        try h.writeConfig(["providers": ["test": server.provider(clientID: clientID, provider)]])
        if start { try h.start() }
    }

    /// Stops the daemon (checking that no token reached its log) and the server.
    func finish(sourceLocation: SourceLocation = #_sourceLocation) {
        h.finish(sourceLocation: sourceLocation)
        server.stop(sourceLocation: sourceLocation)
    }

    /// A `TokenVaultClient` on this vault's socket.
    var client: TokenVaultClient { TokenVaultClient(socketPath: h.socketPath, timeout: 40) }
}

/// The current wall-clock time, Unix seconds.
func unixNow() -> Double { Date().timeIntervalSince1970 }
