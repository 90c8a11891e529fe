/// An error a person reads: a code that maps to an exit status and a
/// protocol error, and a message that names what was wrong but never a secret.
public struct VaultError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The closed set of outcomes shared by the daemon, the protocol, the
    /// client library and the exit codes of `vaultctl` (PRODUCT.md section 5).
    public enum Code: String, Sendable, CaseIterable {
        case failure = "failure"
        case notFound = "not_found"
        case locked = "locked"
        case needsReauth = "needs_reauth"
        case usage = "usage"
        case badInput = "bad_input"
        case unavailable = "unavailable"
        case temporary = "temporary"
        case denied = "denied"
        /// A frame or message the peer should not have sent.
        case protocolError = "protocol"

        /// The exit status of `vaultctl` for this outcome.
        public var exitCode: Int32 {
            switch self {
            case .failure, .protocolError: return 1
            case .notFound: return 3
            case .locked: return 4
            case .needsReauth: return 5
            case .usage: return 64
            case .badInput: return 65
            case .unavailable: return 69
            case .temporary: return 75
            case .denied: return 77
            }
        }
    }

    /// What kind of failure.
    public let code: Code
    /// A readable message without secrets.
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
