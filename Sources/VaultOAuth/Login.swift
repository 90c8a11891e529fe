import Foundation
import VaultCrypto
import VaultModel

/// A PKCE pair (RFC 7636): a high-entropy verifier and its S256 challenge.
public struct PKCE: Sendable {
    public let verifier: String
    public let challenge: String
    public let method = "S256"

    /// 32 random bytes (libsodium), base64url: a 43-character verifier (section 4.1).
    public init() {
        verifier = Digest.base64URL(randomBytes(32))
        challenge = Digest.base64URL(Digest.sha256(Array(verifier.utf8)))
    }

    /// The challenge of a given verifier (for tests against RFC 7636 appendix B).
    public static func challenge(of verifier: String) -> String {
        Digest.base64URL(Digest.sha256(Array(verifier.utf8)))
    }
}

/// An RFC 8628 device authorization response (section 3.2).
public struct DeviceAuthorization: Sendable {
    public let deviceCode: String
    public let userCode: String
    public let verificationURI: String
    public let verificationURIComplete: String?
    public let expiresIn: Double
    public let interval: Double
}

/// What one poll of the token endpoint says during the device flow (RFC 8628 section 3.5).
public enum DevicePoll: Sendable {
    case tokens(TokenResponse)
    case pending
    case slowDown
    case denied
    case expired
}

extension TokenEndpointClient {
    /// The authorization request URL (RFC 6749 section 4.1.1 with PKCE).
    public static func authorizationURL(_ profile: ProviderProfile, redirectURI: String, state: String, pkce: PKCE) throws(EndpointFailure) -> String {
        guard let endpoint = profile.authorizationEndpoint else { throw .rejected("provider \(profile.name) has no authorization endpoint") }
        var params: [(String, String)] = [("response_type", "code"), ("client_id", profile.clientID ?? ""), ("redirect_uri", redirectURI)]
        if !profile.scopes.isEmpty { params.append(("scope", profile.scopes.joined(separator: " "))) }
        params += [("state", state), ("code_challenge", pkce.challenge), ("code_challenge_method", pkce.method)]
        for (k, v) in profile.authorizationParams.sorted(by: { $0.key < $1.key }) { params.append((k, v)) }
        return endpoint + (endpoint.contains("?") ? "&" : "?") + FormEncoding.body(params)
    }

    /// Exchanges an authorization code (RFC 6749 section 4.1.3, RFC 7636 section 4.5).
    public func exchangeCode(_ profile: ProviderProfile, code: String, redirectURI: String, verifier: String, clientSecret: String?) throws(EndpointFailure) -> TokenResponse {
        var form: [(String, String)] = [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", verifier)]
        return try tokenRequest(profile, form: &form, clientSecret: clientSecret)
    }

    /// Starts the device flow (RFC 8628 section 3.1).
    public func deviceAuthorization(_ profile: ProviderProfile, clientSecret: String?) throws(EndpointFailure) -> DeviceAuthorization {
        guard let endpoint = profile.deviceAuthorizationEndpoint else { throw .rejected("provider \(profile.name) has no device authorization endpoint") }
        var form: [(String, String)] = []
        if !profile.scopes.isEmpty { form.append(("scope", profile.scopes.joined(separator: " "))) }
        var headers = profile.tokenHeaders
        try authenticate(profile, clientSecret: clientSecret, form: &form, headers: &headers)
        let a = try post(endpoint, form: form, headers: headers)
        guard a.status == 200, let json = try? JSON.parse(Array(a.body)) else {
            let code = (try? JSON.parse(Array(a.body)))?["error"]?.stringValue.map(ItemName.printable) ?? "HTTP \(a.status)"
            throw a.status >= 500 ? .transient("device authorization of \(profile.name) answered \(code)", retryAfter: nil, responseLost: false)
                                  : .rejected("device authorization of \(profile.name) refused: \(code)")
        }
        guard let device = json["device_code"]?.stringValue, let user = json["user_code"]?.stringValue,
              let uri = json["verification_uri"]?.stringValue ?? json["verification_url"]?.stringValue else {
            throw .rejected("device authorization response of \(profile.name) lacks device_code, user_code or verification_uri")
        }
        return DeviceAuthorization(deviceCode: device, userCode: user, verificationURI: uri,
                                   verificationURIComplete: json["verification_uri_complete"]?.stringValue,
                                   expiresIn: json["expires_in"]?.numberValue ?? 600, interval: json["interval"]?.numberValue ?? 5)
    }

    /// One poll of the token endpoint with the device code (RFC 8628 section 3.4);
    /// the section 3.5 error codes become `DevicePoll` cases.
    public func pollDevice(_ profile: ProviderProfile, deviceCode: String, clientSecret: String?) throws(EndpointFailure) -> DevicePoll {
        guard let endpoint = profile.tokenEndpoint else { throw .rejected("provider \(profile.name) has no token endpoint") }
        var form: [(String, String)] = [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode)]
        var headers = profile.tokenHeaders
        try authenticate(profile, clientSecret: clientSecret, form: &form, headers: &headers)
        let answer = try post(endpoint, form: form, headers: headers)
        switch (try? JSON.parse(Array(answer.body)))?["error"]?.stringValue {
        case "authorization_pending"?: return .pending
        case "slow_down"?: return .slowDown
        case "access_denied"?: return .denied
        case "expired_token"?: return .expired
        default: return .tokens(try Self.interpretTokenAnswer(answer, provider: profile.name))
        }
    }
}
