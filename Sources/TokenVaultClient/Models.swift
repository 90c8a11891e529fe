import VaultModel

/// An access token as served by the daemon.
public struct Token: Sendable, CustomStringConvertible {
    public let provider: String
    public let account: String
    /// The bearer token itself. Never log it.
    public let accessToken: String
    /// Expiry (Unix seconds), nil when the provider did not say.
    public let expiresAt: Double?
    public let scope: String?

    /// `Authorization: Bearer …` header value (without the field name).
    public var bearerValue: String { "Bearer " + accessToken }

    public var description: String { "Token(\(provider)/\(account), redacted)" }
}

/// One item as `list` shows it.
public struct ItemInfo: Sendable, Equatable {
    public let provider: String
    public let account: String
    public let kind: String
    public let mode: AccessMode
    public let state: ItemState
    public let expiresAt: Double?
    public let backend: String
    /// Whether the daemon can refresh this item, and if not, why.
    public let refreshable: Bool
    public let note: String?
}

/// The daemon's state as `status` shows it.
public struct DaemonStatus: Sendable {
    /// The raw status object, for `--json`.
    public let json: JSON
    public var lockState: String { json["lock_state"]?.stringValue ?? "?" }
    public var backend: String { json["backend"]?.stringValue ?? "?" }
}
