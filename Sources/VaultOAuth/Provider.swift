import VaultModel

/// How a client authenticates at the token endpoint (RFC 6749 section 2.3).
public enum ClientAuthMethod: String, Sendable {
    case clientSecretBasic = "client_secret_basic"
    case clientSecretPost = "client_secret_post"
    case none
}

/// A provider's endpoints and behaviour, resolved from its config entry,
/// its preset and, where it has an `issuer`, RFC 8414 discovery.
public struct ProviderProfile: Sendable, Equatable {
    public var name: String
    public var clientID: String?
    public var clientAuth: ClientAuthMethod
    public var grant: String
    public var scopes: [String]
    public var tokenHeaders: [String: String]
    public var authorizationParams: [String: String]
    public var issuer: String?
    public var authorizationEndpoint: String?
    public var tokenEndpoint: String?
    public var revocationEndpoint: String?
    public var deviceAuthorizationEndpoint: String?

    public init(name: String, clientID: String? = nil, clientAuth: ClientAuthMethod = .none, grant: String = "authorization_code",
                scopes: [String] = [], tokenHeaders: [String: String] = [:], authorizationParams: [String: String] = [:],
                issuer: String? = nil, authorizationEndpoint: String? = nil, tokenEndpoint: String? = nil,
                revocationEndpoint: String? = nil, deviceAuthorizationEndpoint: String? = nil) {
        self.name = name
        self.clientID = clientID
        self.clientAuth = clientAuth
        self.grant = grant
        self.scopes = scopes
        self.tokenHeaders = tokenHeaders
        self.authorizationParams = authorizationParams
        self.issuer = issuer
        self.authorizationEndpoint = authorizationEndpoint
        self.tokenEndpoint = tokenEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
    }
}

/// Built-in provider presets: endpoints, client authentication and quirks.
public enum ProviderPreset {
    /// The preset named `name`, with the user's client id still to be filled in.
    public static func profile(_ name: String) -> ProviderProfile? {
        switch name {
        case "github":
            // GitHub answers errors with HTTP 200 and, for OAuth apps, omits expires_in.
            return ProviderProfile(name: name, clientAuth: .clientSecretPost,
                                   authorizationEndpoint: "https://github.com/login/oauth/authorize",
                                   tokenEndpoint: "https://github.com/login/oauth/access_token",
                                   deviceAuthorizationEndpoint: "https://github.com/login/device/code")
        case "gitlab":
            return ProviderProfile(name: name, clientAuth: .none,
                                   authorizationEndpoint: "https://gitlab.com/oauth/authorize",
                                   tokenEndpoint: "https://gitlab.com/oauth/token",
                                   revocationEndpoint: "https://gitlab.com/oauth/revoke",
                                   deviceAuthorizationEndpoint: "https://gitlab.com/oauth/authorize_device")
        case "google":
            return ProviderProfile(name: name, clientAuth: .clientSecretPost,
                                   authorizationParams: ["access_type": "offline", "prompt": "consent"],
                                   authorizationEndpoint: "https://accounts.google.com/o/oauth2/v2/auth",
                                   tokenEndpoint: "https://oauth2.googleapis.com/token",
                                   revocationEndpoint: "https://oauth2.googleapis.com/revoke",
                                   deviceAuthorizationEndpoint: "https://oauth2.googleapis.com/device/code")
        case "microsoft":
            return ProviderProfile(name: name, clientAuth: .none, scopes: ["offline_access"],
                                   authorizationEndpoint: "https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
                                   tokenEndpoint: "https://login.microsoftonline.com/common/oauth2/v2.0/token",
                                   deviceAuthorizationEndpoint: "https://login.microsoftonline.com/common/oauth2/v2.0/devicecode")
        default:
            return nil
        }
    }
}
