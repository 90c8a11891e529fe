/// An RFC 6749 section 5.1 token response, validated as PRODUCT.md section 4
/// asks: `token_type` Bearer (any case), `access_token` present, a missing
/// `expires_in` means unknown expiry, unknown fields are kept.
public struct TokenResponse: Sendable {
    public let accessToken: String
    public let tokenType: String
    /// Lifetime in seconds, nil when the provider did not say.
    public let expiresIn: Double?
    public let refreshToken: String?
    public let scope: String?
    /// Every field as received (unknown ones included).
    public let fields: JSONObject

    /// Validates `json`. Errors are `badInput` and name the field, never its value.
    public init(validating json: JSON) throws(VaultError) {
        guard let o = json.objectValue else { throw VaultError(.badInput, "token response must be a JSON object, got \(json.typeName)") }
        if let error = o["error"]?.stringValue {
            throw VaultError(.badInput, "token response is an OAuth error: \(ItemName.printable(error))")
        }
        guard let access = o["access_token"] else { throw VaultError(.badInput, "token response has no access_token") }
        guard let accessText = access.stringValue, !accessText.isEmpty else {
            throw VaultError(.badInput, "token response field access_token must be a non-empty string")
        }
        guard let type = o["token_type"] else { throw VaultError(.badInput, "token response has no token_type") }
        guard let typeText = type.stringValue else { throw VaultError(.badInput, "token response field token_type must be a string") }
        guard typeText.lowercased() == "bearer" else {
            throw VaultError(.badInput, "token response has token_type \"\(ItemName.printable(typeText))\"; only Bearer is supported")
        }
        var expires: Double?
        switch o["expires_in"] {
        case nil, .null?: expires = nil
        case .number(let n)?: expires = n
        case .string(let s)?:
            guard let n = Double(s) else { throw VaultError(.badInput, "token response field expires_in must be a number") }
            expires = n
        default: throw VaultError(.badInput, "token response field expires_in must be a number")
        }
        if let e = expires, !(e >= 0 && e < 100 * 365 * 86400) {
            throw VaultError(.badInput, "token response field expires_in is out of range")
        }
        var refresh: String?
        switch o["refresh_token"] {
        case nil, .null?: refresh = nil
        case .string(let s)?: refresh = s.isEmpty ? nil : s
        default: throw VaultError(.badInput, "token response field refresh_token must be a string")
        }
        var scope: String?
        switch o["scope"] {
        case nil, .null?: scope = nil
        case .string(let s)?: scope = s
        case .array(let a)?: scope = a.compactMap(\.stringValue).joined(separator: " ")
        default: throw VaultError(.badInput, "token response field scope must be a string")
        }
        accessToken = accessText
        tokenType = "Bearer"
        expiresIn = expires
        refreshToken = refresh
        self.scope = scope
        fields = o
    }
}
