import Dispatch
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import VaultModel

/// Talks to a provider's token, revocation and discovery endpoints over one
/// long-lived `URLSession` with explicit timeouts (RFC 6749 section 6,
/// RFC 7009, RFC 8414).
///
/// The calls block the calling thread until the answer (they are made from
/// the daemon's connection and refresh threads, never from Swift's
/// cooperative pool). Error messages carry the HTTP status and the OAuth
/// error code, never a token or a secret.
public final class TokenEndpointClient: Sendable {
    private let session: URLSession
    /// Seconds a request may take.
    public let timeout: Double

    public init(timeout: Double = 15) {
        let config = URLSessionConfiguration.ephemeral
        config.timeoutIntervalForRequest = timeout
        config.timeoutIntervalForResource = timeout
        config.httpShouldSetCookies = false
        config.httpCookieAcceptPolicy = .never
        config.urlCache = nil
        config.requestCachePolicy = .reloadIgnoringLocalCacheData
        session = URLSession(configuration: config)
        self.timeout = timeout
    }

    /// A raw HTTP answer.
    struct Answer {
        let status: Int
        let headers: [String: String]
        let body: Data
    }

    /// POSTs a form and waits (`URLSession.dataTask`, with a semaphore).
    func post(_ endpoint: String, form: [(String, String)], headers: [String: String]) throws(EndpointFailure) -> Answer {
        guard let url = URL(string: endpoint) else { throw .rejected("endpoint \(endpoint) is not a URL") }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.timeoutInterval = timeout
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        request.setValue("TokenVault/0.1", forHTTPHeaderField: "User-Agent")
        for (k, v) in headers { request.setValue(v, forHTTPHeaderField: k) }
        request.httpBody = Data(FormEncoding.body(form).utf8)
        return try perform(request, what: endpoint)
    }

    /// GETs JSON and waits.
    func get(_ endpoint: String) throws(EndpointFailure) -> Answer {
        guard let url = URL(string: endpoint) else { throw .rejected("endpoint \(endpoint) is not a URL") }
        var request = URLRequest(url: url)
        request.timeoutInterval = timeout
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        return try perform(request, what: endpoint)
    }

    private func perform(_ request: URLRequest, what: String) throws(EndpointFailure) -> Answer {
        final class Box: @unchecked Sendable {  // written once by the completion handler before the semaphore signals
            var result: Result<Answer, URLError>?
        }
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        let task = session.dataTask(with: request) { data, response, error in
            if let error {
                box.result = .failure(error as? URLError ?? URLError(.unknown))
            } else if let http = response as? HTTPURLResponse {
                var headers: [String: String] = [:]
                for (k, v) in http.allHeaderFields { headers[String(describing: k).lowercased()] = String(describing: v) }
                box.result = .success(Answer(status: http.statusCode, headers: headers, body: data ?? Data()))
            } else {
                box.result = .failure(URLError(.badServerResponse))
            }
            done.signal()
        }
        task.resume()
        if done.wait(timeout: .now() + timeout + 5) == .timedOut {
            task.cancel()
            throw .transient("\(what) did not answer within \(Int(timeout)) s", retryAfter: nil, responseLost: true)
        }
        switch box.result! {
        case .success(let a): return a
        case .failure(let e):
            // Before the connection was made, nothing was sent; after it, the request may have arrived.
            let notSent: Set<URLError.Code> = [.cannotConnectToHost, .cannotFindHost, .dnsLookupFailed, .notConnectedToInternet,
                                               .secureConnectionFailed, .serverCertificateUntrusted, .badURL, .unsupportedURL]
            throw .transient("cannot reach \(what): \(e.localizedDescription) (URLError \(e.code.rawValue))", retryAfter: nil, responseLost: !notSent.contains(e.code))
        }
    }

    // MARK: - Grants

    /// Client authentication, RFC 6749 section 2.3.1.
    func authenticate(_ profile: ProviderProfile, clientSecret: String?, form: inout [(String, String)], headers: inout [String: String]) throws(EndpointFailure) {
        let clientID = profile.clientID ?? ""
        switch profile.clientAuth {
        case .none:
            if !clientID.isEmpty { form.append(("client_id", clientID)) }
        case .clientSecretPost, .clientSecretBasic:
            // Without a stored secret, act as a public client and let the provider decide
            // (GitHub's device flow needs no secret even for apps that have one).
            guard let clientSecret else {
                if !clientID.isEmpty { form.append(("client_id", clientID)) }
                return
            }
            if profile.clientAuth == .clientSecretPost {
                form.append(("client_id", clientID))
                form.append(("client_secret", clientSecret))
                return
            }
            let pair = FormEncoding.encode(clientID) + ":" + FormEncoding.encode(clientSecret)
            headers["Authorization"] = "Basic " + Data(pair.utf8).base64EncodedString()
        }
    }

    /// The refresh grant (RFC 6749 section 6).
    public func refresh(_ profile: ProviderProfile, refreshToken: String, clientSecret: String?) throws(EndpointFailure) -> TokenResponse {
        var form: [(String, String)] = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        return try tokenRequest(profile, form: &form, clientSecret: clientSecret)
    }

    /// The client credentials grant (RFC 6749 section 4.4).
    public func clientCredentials(_ profile: ProviderProfile, clientSecret: String?) throws(EndpointFailure) -> TokenResponse {
        var form: [(String, String)] = [("grant_type", "client_credentials")]
        if !profile.scopes.isEmpty { form.append(("scope", profile.scopes.joined(separator: " "))) }
        return try tokenRequest(profile, form: &form, clientSecret: clientSecret)
    }

    /// Any grant at the token endpoint, with client authentication and validation.
    public func tokenRequest(_ profile: ProviderProfile, form: inout [(String, String)], clientSecret: String?) throws(EndpointFailure) -> TokenResponse {
        guard let endpoint = profile.tokenEndpoint else { throw .rejected("provider \(profile.name) has no token endpoint") }
        var headers = profile.tokenHeaders
        try authenticate(profile, clientSecret: clientSecret, form: &form, headers: &headers)
        let answer = try post(endpoint, form: form, headers: headers)
        return try Self.interpretTokenAnswer(answer, provider: profile.name)
    }

    /// Classifies a token-endpoint answer: tolerant of unknown fields, of
    /// errors sent with HTTP 200 (GitHub), and of comma-separated scopes.
    static func interpretTokenAnswer(_ a: Answer, provider: String) throws(EndpointFailure) -> TokenResponse {
        let retryAfter = a.headers["retry-after"].flatMap(Self.parseRetryAfter)
        let json = try? JSON.parse(Array(a.body))
        if a.status == 429 || a.status >= 500 {
            throw .transient("token endpoint of \(provider) answered HTTP \(a.status)", retryAfter: retryAfter, responseLost: false)
        }
        guard let json, json.objectValue != nil else {
            throw .transient("token endpoint of \(provider) answered HTTP \(a.status) without a JSON object", retryAfter: retryAfter, responseLost: false)
        }
        if let code = json["error"]?.stringValue {
            let description = json["error_description"]?.stringValue.map { ": " + ItemName.printable($0) } ?? ""
            let text = "token endpoint of \(provider) refused: \(ItemName.printable(code))\(description)"
            switch code {
            case "invalid_grant", "invalid_client", "unauthorized_client", "bad_refresh_token", "bad_verification_code":
                throw .needsReauth(text)
            case "temporarily_unavailable", "server_error", "slow_down":
                throw .transient(text, retryAfter: retryAfter, responseLost: false)
            default:
                throw .rejected(text)
            }
        }
        guard (200..<300).contains(a.status) else {
            throw .transient("token endpoint of \(provider) answered HTTP \(a.status)", retryAfter: retryAfter, responseLost: false)
        }
        do {
            return try TokenResponse(validating: json)
        } catch {
            throw .transient("token endpoint of \(provider) sent an unusable response: \(error.message)", retryAfter: retryAfter, responseLost: false)
        }
    }

    /// `Retry-After` as seconds: delta-seconds, or an HTTP date (RFC 9110 section 10.2.3).
    static func parseRetryAfter(_ value: String) -> Double? {
        let v = value.trimmingCharacters(in: .whitespaces)
        if let n = Double(v), n >= 0 { return min(n, 86400) }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let d = f.date(from: v) else { return nil }
        return max(0, min(d.timeIntervalSinceNow, 86400))
    }

    /// Token revocation (RFC 7009 section 2): 200 means revoked (or already invalid).
    public func revoke(_ profile: ProviderProfile, token: String, hint: String, clientSecret: String?) throws(EndpointFailure) {
        guard let endpoint = profile.revocationEndpoint else { throw .rejected("provider \(profile.name) has no revocation endpoint") }
        var form: [(String, String)] = [("token", token), ("token_type_hint", hint)]
        var headers = profile.tokenHeaders
        try authenticate(profile, clientSecret: clientSecret, form: &form, headers: &headers)
        let a = try post(endpoint, form: form, headers: headers)
        if a.status == 200 { return }
        let retryAfter = a.headers["retry-after"].flatMap(Self.parseRetryAfter)
        if a.status == 503 || a.status == 429 || a.status >= 500 {
            throw .transient("revocation endpoint of \(profile.name) answered HTTP \(a.status)", retryAfter: retryAfter, responseLost: false)
        }
        let code = (try? JSON.parse(Array(a.body)))?["error"]?.stringValue.map(ItemName.printable) ?? "HTTP \(a.status)"
        throw .rejected("revocation endpoint of \(profile.name) refused: \(code)")
    }

    // MARK: - Discovery

    /// RFC 8414 authorization server metadata (then OIDC discovery) for
    /// `issuer`; the `issuer` in the document must match (section 3.3).
    public func discover(issuer: String) throws(EndpointFailure) -> ProviderProfile {
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        var lastError = EndpointFailure.rejected("no metadata at \(base)")
        for path in ["/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"] {
            let a: Answer
            do { a = try get(base + path) } catch { lastError = error; continue }
            guard a.status == 200, let json = try? JSON.parse(Array(a.body)), json.objectValue != nil else {
                lastError = .rejected("\(base + path) answered HTTP \(a.status) without metadata")
                continue
            }
            let found = json["issuer"]?.stringValue ?? ""
            let normalized = found.hasSuffix("/") ? String(found.dropLast()) : found
            guard normalized == base else {
                throw .rejected("metadata at \(base + path) names issuer \(ItemName.printable(found)), not \(base)")
            }
            var p = ProviderProfile(name: "", issuer: base)
            p.authorizationEndpoint = json["authorization_endpoint"]?.stringValue
            p.tokenEndpoint = json["token_endpoint"]?.stringValue
            p.revocationEndpoint = json["revocation_endpoint"]?.stringValue
            p.deviceAuthorizationEndpoint = json["device_authorization_endpoint"]?.stringValue
            return p
        }
        throw lastError
    }
}
