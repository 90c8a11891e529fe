import Synchronization
import VaultModel
import VaultOAuth
import VaultSystem

/// Resolves a provider name into endpoints and client settings: the
/// config entry over its preset, and RFC 8414 discovery for an `issuer`
/// (cached for an hour; a failed discovery is not cached).
public final class ProviderDirectory: Sendable {
    /// Read by every token request; written on SIGHUP.
    private let config: SharedLock<Config>
    private let discovered = Mutex<[String: (profile: ProviderProfile, at: Double)]>([:])
    let client: TokenEndpointClient

    public init(config: Config, client: TokenEndpointClient) {
        self.config = SharedLock(config)
        self.client = client
    }

    /// Replaces the config (SIGHUP); discovery results are kept.
    public func replaceConfig(_ new: Config) { config.withLock { $0 = new } }

    /// The current config.
    public var current: Config { config.read { $0 } }

    /// The provider's `allowed_clients`, read in place (every token request asks).
    public func allowedClients(_ provider: String) -> [String]? { config.read { $0.providers[provider]?.allowedClients } }

    /// Why `provider` cannot be refreshed, or nil if it can (without network).
    public func refreshNote(_ provider: String) -> String? {
        guard let p = current.providers[provider] else { return "provider not in config" }
        if p.tokenEndpoint == nil && p.issuer == nil && p.preset == nil { return "provider has no token endpoint" }
        return nil
    }

    /// The provider's profile, running discovery if it has an issuer.
    public func profile(_ provider: String) throws(EndpointFailure) -> ProviderProfile {
        guard let c = current.providers[provider] else { throw .rejected("provider \(provider) is not in the config") }
        var p = c.preset.flatMap(ProviderPreset.profile) ?? ProviderProfile(name: provider)
        p.name = provider
        if let issuer = c.issuer {
            let cached = discovered.withLock { $0[issuer] }
            let d: ProviderProfile
            if let cached, WallClock.now() - cached.at < 3600 {
                d = cached.profile
            } else {
                d = try client.discover(issuer: issuer)
                discovered.withLock { $0[issuer] = (d, WallClock.now()) }
            }
            p.issuer = issuer
            p.authorizationEndpoint = d.authorizationEndpoint ?? p.authorizationEndpoint
            p.tokenEndpoint = d.tokenEndpoint ?? p.tokenEndpoint
            p.revocationEndpoint = d.revocationEndpoint ?? p.revocationEndpoint
            p.deviceAuthorizationEndpoint = d.deviceAuthorizationEndpoint ?? p.deviceAuthorizationEndpoint
        }
        if let v = c.authorizationEndpoint { p.authorizationEndpoint = v }
        if let v = c.tokenEndpoint { p.tokenEndpoint = v }
        if let v = c.revocationEndpoint { p.revocationEndpoint = v }
        if let v = c.deviceAuthorizationEndpoint { p.deviceAuthorizationEndpoint = v }
        if let v = c.clientID { p.clientID = v }
        if let v = c.clientAuth.flatMap(ClientAuthMethod.init(rawValue:)) { p.clientAuth = v }
        p.grant = c.grant
        if !c.scopes.isEmpty { p.scopes = c.scopes }
        p.tokenHeaders.merge(c.tokenHeaders) { _, new in new }
        p.authorizationParams.merge(c.authorizationParams) { _, new in new }
        return p
    }

    /// When to refresh a token that expires at `expiresAt` and was obtained
    /// at `obtainedAt` (PRODUCT.md section 4): `refresh_margin_seconds`, else
    /// 10 % of the lifetime but at least 60 s, never more than half the
    /// lifetime; minus a jitter of up to 10 % of the margin.
    public func refreshDue(provider: String, expiresAt: Double, obtainedAt: Double, jitter: Double) -> Double {
        let lifetime = max(expiresAt - obtainedAt, 0)
        var margin = current.providers[provider]?.refreshMarginSeconds ?? max(60, lifetime * 0.1)
        margin = min(margin, lifetime / 2)
        return expiresAt - margin - margin * 0.1 * min(max(jitter, 0), 1)
    }
}
