import VaultCrypto
import VaultModel
import VaultOAuth
import VaultStore

extension Vault {
    /// Stores a validated token response as `key`'s sealed record: every
    /// field as received plus `obtained_at`, the expiry from `expires_in` (or
    /// `assumeLifetime` when the provider gave none), and `keepRefreshToken`
    /// when a refresh response carried no new refresh token. The plaintext
    /// buffer is wiped once sealed. One durable commit; used by `add`,
    /// `login` and the refresh engine alike.
    @discardableResult
    func storeTokenResponse(_ key: ItemKey, mode: AccessMode, _ response: TokenResponse, assumeLifetime: Double?,
                            keepRefreshToken: String? = nil) throws(VaultError) -> StoredItem {
        let now = WallClock.now()
        var fields = response.fields
        if response.refreshToken == nil, let keepRefreshToken { fields["refresh_token"] = .string(keepRefreshToken) }
        fields["obtained_at"] = .number(now.rounded(.down))
        var payload = JSON.object(fields).serialized()
        defer { secureZero(&payload) }
        let lifetime = response.expiresIn ?? assumeLifetime
        return try put(key, mode: mode, secrets: payload, expiresAt: lifetime.map { now + $0 }, status: .ok)
    }
}
