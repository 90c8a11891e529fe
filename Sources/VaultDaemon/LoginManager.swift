@preconcurrency import Glibc
import Dispatch
import Synchronization
import VaultCrypto
import VaultModel
import VaultOAuth
import VaultStore
import VaultSystem

/// Logins (PRODUCT.md section 4): the authorization code grant with PKCE
/// over a loopback redirect (RFC 8252, RFC 7636), the device authorization
/// grant (RFC 8628), and the client credentials grant.
///
/// The daemon runs the flow, so the client secret and the tokens never pass
/// through `vaultctl`; `vaultctl` shows the URL or code and waits. Outcomes:
/// - the vault is locked for the item's mode: refused at the start, or, if it
///   locks while the login waits, the new tokens are discarded (`locked`);
/// - a second login for the same item while one waits: refused;
/// - the waiting client goes away (Ctrl-C): the login is cancelled and its
///   loopback listener closed; nothing is stored.
/// A successful login replaces the item's tokens.
public final class LoginManager: Sendable {
    /// One login in progress.
    final class Session: Sendable {
        let id: String
        let key: ItemKey
        let mode: AccessMode
        let deadline: ContinuousClock.Instant
        let finished = DispatchGroup()
        let outcome = Mutex<Result<JSON, VaultError>?>(nil)
        let cancelled = Atomic<Bool>(false)

        init(id: String, key: ItemKey, mode: AccessMode, timeout: Double) {
            self.id = id
            self.key = key
            self.mode = mode
            deadline = .now + .milliseconds(Int64(timeout * 1000))
            finished.enter()
        }

        /// Records the outcome once; later calls change nothing.
        func finish(_ result: Result<JSON, VaultError>) {
            let first = outcome.withLock { o -> Bool in
                guard o == nil else { return false }
                o = result
                return true
            }
            if first { finished.leave() }
        }

        var isOver: Bool {
            cancelled.load(ordering: .relaxed) || ContinuousClock.now >= deadline || outcome.withLock { $0 != nil }
        }
    }

    let vault: Vault
    let providers: ProviderDirectory
    let engine: RefreshEngine
    let logger: Logger
    let audit: AuditLog
    private let sessions = Mutex<[String: Session]>([:])

    public init(vault: Vault, providers: ProviderDirectory, engine: RefreshEngine, logger: Logger, audit: AuditLog) {
        self.vault = vault
        self.providers = providers
        self.engine = engine
        self.logger = logger
        self.audit = audit
    }

    // MARK: - Start

    /// Starts a login and returns what the user must see: an authorization
    /// URL, or a device code, or (client credentials) the stored result.
    func start(_ key: ItemKey, mode requested: AccessMode?, device: Bool, timeout: Double, peer: Peer) throws(VaultError) -> JSON {
        let profile: ProviderProfile
        do { profile = try providers.profile(key.provider) } catch {
            throw VaultError(error.isTransient ? .temporary : .notFound, "cannot log in to \(key.provider): \(error.description)")
        }
        let mode = requested ?? providers.current.providers[key.provider]?.defaultMode ?? .default
        guard vault.canStore(mode) else {
            throw VaultError(.locked, "\(key) cannot be stored now in mode \(mode.rawValue): unlock the vault first (vaultctl unlock)")
        }
        let clientSecret = try readClientSecret(key.provider)
        if clientSecret == nil && profile.clientAuth != .none && !device && profile.grant != "device_code" {
            throw VaultError(.failure, "provider \(key.provider) uses \(profile.clientAuth.rawValue): store its client secret first (vaultctl client-secret set \(key.provider))")
        }
        if profile.grant == "client_credentials" {
            let response: TokenResponse
            do { response = try providers.client.clientCredentials(profile, clientSecret: clientSecret) } catch {
                throw VaultError(error.isTransient ? .temporary : .denied, "client credentials login to \(key.provider) failed: \(error.description)")
            }
            let stored = try store(key, mode: mode, response, peer: peer)
            return .object(JSONObject([("done", true), ("result", stored)]))
        }
        let session = Session(id: Digest.base64URL(randomBytes(12)), key: key, mode: mode, timeout: timeout)
        try sessions.withLock { s throws(VaultError) in
            if let other = s.values.first(where: { $0.key == key && !$0.isOver }) {
                _ = other
                throw VaultError(.failure, "a login for \(key) is already waiting; finish or cancel it first")
            }
            s = s.filter { !$0.value.isOver }
            s[session.id] = session
        }
        do {
            if device || profile.grant == "device_code" {
                return try startDevice(session, profile, clientSecret: clientSecret, peer: peer)
            }
            return try startCode(session, profile, clientSecret: clientSecret, peer: peer)
        } catch {
            session.finish(.failure(error))
            _ = sessions.withLock { $0.removeValue(forKey: session.id) }
            throw error
        }
    }

    private func readClientSecret(_ provider: String) throws(VaultError) -> String? {
        do {
            return try vault.withSecrets(RefreshEngine.clientSecretKey(provider)) { (_, plain) throws(VaultError) -> String in
                String(decoding: plain, as: UTF8.self)
            }
        } catch where error.code == .notFound {
            return nil
        }
    }

    /// The authorization code flow: a one-shot loopback listener.
    private func startCode(_ session: Session, _ profile: ProviderProfile, clientSecret: String?, peer: Peer) throws(VaultError) -> JSON {
        let listener: LoopbackListener
        do { listener = try LoopbackListener() } catch { throw VaultError(.failure, "cannot listen for the redirect: \(error)") }
        let redirectURI = "http://127.0.0.1:\(listener.port)/callback"
        let state = Digest.base64URL(randomBytes(16))
        let pkce = PKCE()
        let url: String
        do { url = try TokenEndpointClient.authorizationURL(profile, redirectURI: redirectURI, state: state, pkce: pkce) } catch {
            throw VaultError(.failure, error.description)
        }
        do {
            try spawnThread(stackSize: 512 * 1024) { [self] in
                awaitRedirect(session, listener: listener, profile: profile, redirectURI: redirectURI, state: state,
                              verifier: pkce.verifier, clientSecret: clientSecret, peer: peer)
            }
        } catch {
            throw VaultError(.failure, "cannot start the login: \(error)")
        }
        logger.info("login of \(session.key) started by pid \(peer.pid): waiting for the redirect on 127.0.0.1:\(listener.port)")
        return .object(JSONObject([("session", .string(session.id)), ("authorization_url", .string(url)),
                                   ("redirect_uri", .string(redirectURI))]))
    }

    private func awaitRedirect(_ session: Session, listener: LoopbackListener, profile: ProviderProfile, redirectURI: String,
                               state: String, verifier: String, clientSecret: String?, peer: Peer) {
        defer { _ = sessions.withLock { $0.removeValue(forKey: session.id) } }
        defer { listener.stopListening() }
        while !session.isOver {
            if peer.hasGoneAway { cancel(session, why: "its client went away") }
            guard let conn = try? listener.accept(timeoutMs: 250) else { continue }
            guard let request = readHTTPRequest(conn) else { continue }
            // Only GET /callback?… is the redirect; anything else (a favicon, a probe) gets 404.
            guard request.method == "GET", request.path == "/callback" else {
                respond(conn, status: "404 Not Found", title: "Not found", text: "This is TokenVault's login listener.")
                continue
            }
            let q = request.query
            guard q["state"] == state else {
                respond(conn, status: "400 Bad Request", title: "Login failed", text: "The state parameter does not match this login. Nothing was stored.")
                listener.stopListening()
                session.finish(.failure(VaultError(.denied, "the redirect carried a wrong state (a forged or stale login); nothing was stored")))
                return
            }
            if let error = q["error"] {
                respond(conn, status: "200 OK", title: "Login failed", text: "The provider said: \(htmlEscape(error)). Nothing was stored.")
                listener.stopListening()
                session.finish(.failure(VaultError(.denied, "the provider refused the login: \(ItemName.printable(error))")))
                return
            }
            guard let code = q["code"], !code.isEmpty else {
                respond(conn, status: "400 Bad Request", title: "Login failed", text: "The redirect carried no code.")
                listener.stopListening()
                session.finish(.failure(VaultError(.badInput, "the redirect carried no authorization code")))
                return
            }
            let result: Result<JSON, VaultError>
            do {
                let response = try providers.client.exchangeCode(profile, code: code, redirectURI: redirectURI, verifier: verifier, clientSecret: clientSecret)
                result = .success(try storeChecked(session, response, peer: peer))
            } catch let e as EndpointFailure {
                result = .failure(VaultError(e.isTransient ? .temporary : .denied, "the code exchange failed: \(e.description)"))
            } catch let e as VaultError {
                result = .failure(e)
            } catch {
                result = .failure(VaultError(.failure, "\(error)"))
            }
            switch result {
            case .success: respond(conn, status: "200 OK", title: "Logged in", text: "TokenVault stored the tokens of \(htmlEscape(session.key.description)). You can close this page.")
            case .failure(let e): respond(conn, status: "200 OK", title: "Login failed", text: htmlEscape(e.message))
            }
            listener.stopListening()
            session.finish(result)
            return
        }
        session.finish(.failure(session.cancelled.load(ordering: .relaxed)
            ? VaultError(.failure, "the login was cancelled; nothing was stored")
            : VaultError(.temporary, "no redirect came before the login timed out; nothing was stored")))
    }

    /// The device flow: polls at the given interval (RFC 8628 section 3.5).
    private func startDevice(_ session: Session, _ profile: ProviderProfile, clientSecret: String?, peer: Peer) throws(VaultError) -> JSON {
        let auth: DeviceAuthorization
        do { auth = try providers.client.deviceAuthorization(profile, clientSecret: clientSecret) } catch {
            throw VaultError(error.isTransient ? .temporary : .failure, error.description)
        }
        do {
            try spawnThread(stackSize: 512 * 1024) { [self] in
                pollDevice(session, profile, auth, clientSecret: clientSecret, peer: peer)
            }
        } catch {
            throw VaultError(.failure, "cannot start the login: \(error)")
        }
        logger.info("device login of \(session.key) started by pid \(peer.pid)")
        var o = JSONObject([("session", .string(session.id)), ("user_code", .string(auth.userCode)),
                            ("verification_uri", .string(auth.verificationURI)),
                            ("expires_in", .number(auth.expiresIn)), ("interval", .number(auth.interval))])
        if let complete = auth.verificationURIComplete { o["verification_uri_complete"] = .string(complete) }
        return .object(o)
    }

    private func pollDevice(_ session: Session, _ profile: ProviderProfile, _ auth: DeviceAuthorization, clientSecret: String?, peer: Peer) {
        defer { _ = sessions.withLock { $0.removeValue(forKey: session.id) } }
        var interval = max(auth.interval, 1)
        let codeDeadline = ContinuousClock.now + .milliseconds(Int64(auth.expiresIn * 1000))
        while true {
            // Sleep one interval in short slices, so a cancel is noticed at once.
            let wake = ContinuousClock.now + .milliseconds(Int64(interval * 1000))
            while ContinuousClock.now < wake && !session.isOver {
                if peer.hasGoneAway { cancel(session, why: "its client went away") }
                usleep(100_000)
            }
            if session.isOver || ContinuousClock.now >= codeDeadline {
                session.finish(.failure(session.cancelled.load(ordering: .relaxed)
                    ? VaultError(.failure, "the login was cancelled; nothing was stored")
                    : VaultError(.temporary, "the device code expired before it was approved; nothing was stored")))
                return
            }
            do {
                switch try providers.client.pollDevice(profile, deviceCode: auth.deviceCode, clientSecret: clientSecret) {
                case .pending: continue
                case .slowDown: interval += 5
                case .denied:
                    session.finish(.failure(VaultError(.denied, "the login was denied at the provider; nothing was stored")))
                    return
                case .expired:
                    session.finish(.failure(VaultError(.temporary, "the device code expired before it was approved; nothing was stored")))
                    return
                case .tokens(let response):
                    do { session.finish(.success(try storeChecked(session, response, peer: peer))) } catch { session.finish(.failure(error)) }
                    return
                }
            } catch {
                if error.isTransient {
                    logger.warning("device login of \(session.key): \(error.description); polling on")
                    continue
                }
                session.finish(.failure(VaultError(.denied, "the device login failed: \(error.description)")))
                return
            }
        }
    }

    // MARK: - Wait and cancel

    /// Waits for a login to end. If the waiting client goes away, the login is cancelled.
    func wait(_ id: String, peer: Peer) throws(VaultError) -> JSON {
        guard let session = sessions.withLock({ $0[id] }) else { throw VaultError(.notFound, "no login \(ItemName.printable(id)) is waiting") }
        while session.finished.wait(timeout: .now() + .milliseconds(250)) == .timedOut {
            if peer.hasGoneAway {
                cancel(session, why: "its client went away")
            }
        }
        switch session.outcome.withLock({ $0 }) {
        case .success(let json)?: return json
        case .failure(let error)?: throw error
        case nil: throw VaultError(.failure, "the login ended without a result")
        }
    }

    /// Cancels a waiting login: nothing is stored.
    func cancel(_ id: String) throws(VaultError) {
        guard let session = sessions.withLock({ $0[id] }) else { throw VaultError(.notFound, "no login \(ItemName.printable(id)) is waiting") }
        cancel(session, why: "on request")
    }

    private func cancel(_ session: Session, why: String) {
        guard !session.cancelled.exchange(true, ordering: .relaxed) else { return }
        logger.info("login of \(session.key) cancelled: \(why)")
    }

    // MARK: - Storing

    /// Stores unless the login was cancelled meanwhile.
    private func storeChecked(_ session: Session, _ response: TokenResponse, peer: Peer) throws(VaultError) -> JSON {
        if session.cancelled.load(ordering: .relaxed) { throw VaultError(.failure, "the login was cancelled; nothing was stored") }
        return try store(session.key, mode: session.mode, response, peer: peer)
    }

    private func store(_ key: ItemKey, mode: AccessMode, _ response: TokenResponse, peer: Peer) throws(VaultError) -> JSON {
        let item = try vault.storeTokenResponse(key, mode: mode, response,
                                                assumeLifetime: providers.current.providers[key.provider]?.assumeLifetimeSeconds)
        engine.itemChanged(key)
        audit.record("login", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        logger.info("logged in \(key) (\(mode.rawValue))")
        return .object(JSONObject([("provider", .string(key.provider)), ("account", .string(key.account)),
                                   ("mode", .string(item.mode.rawValue)),
                                   ("expires_at", item.expiresAt.map { .string(WallClock.rfc3339($0)) } ?? .null),
                                   ("refresh_token", .bool(response.refreshToken != nil))]))
    }
}

extension EndpointFailure {
    /// Whether trying again later may help.
    var isTransient: Bool {
        if case .transient = self { return true }
        return false
    }
}

// MARK: - A minimal HTTP/1.1 exchange for the loopback redirect

struct HTTPRequest {
    let method: String
    let path: String
    let query: [String: String]
}

/// Reads one request head (at most 8 KiB, within 2 s).
func readHTTPRequest(_ conn: SocketConnection) -> HTTPRequest? {
    var data: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 2048)
    let deadline = ContinuousClock.now + .seconds(2)
    while data.count < 8192 {
        if data.count >= 4, data.suffix(4) == [13, 10, 13, 10] { break }
        let left = deadline - ContinuousClock.now
        guard left > .zero, (try? conn.waitReadable(timeoutMs: Int32(left.components.seconds * 1000 + 1))) == true,
              let n = try? conn.read(into: &buf, offset: 0, count: buf.count), n > 0 else { return nil }
        data += buf[0..<n]
    }
    guard let lineEnd = data.firstIndex(of: 13) else { return nil }
    let parts = String(decoding: data[..<lineEnd], as: UTF8.self).split(separator: " ")
    guard parts.count == 3 else { return nil }
    let target = parts[1]
    let path = String(target.prefix { $0 != "?" })
    var query: [String: String] = [:]
    if let q = target.firstIndex(of: "?") {
        for pair in target[target.index(after: q)...].split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            guard let k = kv.first.map(String.init).flatMap(formDecode) else { continue }
            query[k] = kv.count > 1 ? formDecode(String(kv[1])) : ""
        }
    }
    return HTTPRequest(method: String(parts[0]), path: path, query: query)
}

/// Decodes `+` and `%XX` (application/x-www-form-urlencoded).
func formDecode(_ s: String) -> String? {
    var out: [UInt8] = []
    var bytes = Array(s.utf8)[...]
    while let b = bytes.popFirst() {
        if b == UInt8(ascii: "+") { out.append(32); continue }
        if b == UInt8(ascii: "%") {
            guard bytes.count >= 2, let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) else { return nil }
            out.append(v)
            bytes = bytes.dropFirst(2)
            continue
        }
        out.append(b)
    }
    return String(validating: out, as: UTF8.self)
}

func htmlEscape(_ s: String) -> String {
    var out = ""
    for c in s {
        switch c {
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "&": out += "&amp;"
        case "\"": out += "&quot;"
        default: out.append(c)
        }
    }
    return out
}

/// Writes a small HTML page and closes.
func respond(_ conn: SocketConnection, status: String, title: String, text: String) {
    let body = "<!doctype html><meta charset=utf-8><title>\(title)</title><h1>\(title)</h1><p>\(text)</p>"
    let head = "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    try? conn.writeAll(Array((head + body).utf8), timeoutMs: 2000)
}
