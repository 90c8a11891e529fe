import VaultModel

/// What can go wrong when asking the daemon, one case per exit code of
/// `vaultctl` (PRODUCT.md section 5). Messages never contain a secret.
public enum TokenVaultError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The item's access mode does not allow it now (exit 4).
    case locked(String)
    /// The provider needs a new login (exit 5).
    case needsReauth(String)
    /// No such provider or item (exit 3).
    case notFound(String)
    /// No daemon answers on the socket (exit 69).
    case daemonUnavailable(String)
    /// Wrong passphrase or client not allowed (exit 77).
    case denied(String)
    /// Malformed input data (exit 65).
    case badInput(String)
    /// The provider could not be reached; retry later (exit 75).
    case temporary(String)
    /// The request was not well formed (exit 64).
    case usage(String)
    /// The daemon broke the protocol (exit 1).
    case protocolError(String)
    /// Anything else (exit 1).
    case failure(String)

    /// The case for a shared error code and message.
    public init(_ e: VaultError) {
        switch e.code {
        case .locked: self = .locked(e.message)
        case .needsReauth: self = .needsReauth(e.message)
        case .notFound: self = .notFound(e.message)
        case .unavailable: self = .daemonUnavailable(e.message)
        case .denied: self = .denied(e.message)
        case .badInput: self = .badInput(e.message)
        case .temporary: self = .temporary(e.message)
        case .usage: self = .usage(e.message)
        case .protocolError: self = .protocolError(e.message)
        case .failure: self = .failure(e.message)
        }
    }

    /// The message for a person.
    public var message: String {
        switch self {
        case .locked(let m), .needsReauth(let m), .notFound(let m), .daemonUnavailable(let m), .denied(let m),
             .badInput(let m), .temporary(let m), .usage(let m), .protocolError(let m), .failure(let m):
            return m
        }
    }

    /// The shared error code.
    public var code: VaultError.Code {
        switch self {
        case .locked: return .locked
        case .needsReauth: return .needsReauth
        case .notFound: return .notFound
        case .daemonUnavailable: return .unavailable
        case .denied: return .denied
        case .badInput: return .badInput
        case .temporary: return .temporary
        case .usage: return .usage
        case .protocolError: return .protocolError
        case .failure: return .failure
        }
    }

    /// The exit status `vaultctl` uses for this error.
    public var exitCode: Int32 { code.exitCode }

    public var description: String { message }
}
