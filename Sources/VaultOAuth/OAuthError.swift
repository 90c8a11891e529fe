/// The outcome class of a failed token-endpoint call, which decides what
/// the refresh engine does next (PRODUCT.md section 4).
public enum EndpointFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Network trouble, 5xx, 429, timeout or a garbled answer: retry with
    /// backoff. `retryAfter` is the server's `Retry-After` in seconds.
    /// `responseLost` is true when the request may have reached the server
    /// but no answer came back (so a refresh token may already be spent).
    case transient(String, retryAfter: Double?, responseLost: Bool)
    /// `invalid_grant`, `invalid_client` or `unauthorized_client`: a new login is needed.
    case needsReauth(String)
    /// Anything else the provider refuses for good (bad config, unsupported grant).
    case rejected(String)

    public var description: String {
        switch self {
        case .transient(let m, _, _), .needsReauth(let m), .rejected(let m): return m
        }
    }
}
