import VaultModel
import VaultSystem

/// `config.json` (PRODUCT.md section 6), decoded strictly: an unknown key or
/// a wrong type is a `badInput` error naming the key path.
public struct Config: Sendable {
    /// Which store to use when neither `--store` nor `TOKENVAULT_STORE` says.
    public enum StoreChoice: String, Sendable {
        case auto, sqlite
        case secretService = "secret-service"
    }

    /// One provider's settings.
    public struct Provider: Sendable {
        public var preset: String?
        public var issuer: String?
        public var authorizationEndpoint: String?
        public var tokenEndpoint: String?
        public var revocationEndpoint: String?
        public var deviceAuthorizationEndpoint: String?
        public var grant: String = "authorization_code"
        public var clientID: String?
        public var clientAuth: String?
        public var scopes: [String] = []
        public var authorizationParams: [String: String] = [:]
        public var tokenHeaders: [String: String] = [:]
        public var defaultMode: AccessMode?
        public var refreshMarginSeconds: Double?
        public var assumeLifetimeSeconds: Double?
        /// Executables (`/proc/PID/exe` paths) allowed to get this provider's tokens; nil = any of the user's.
        public var allowedClients: [String]?
        public var notifyCommand: [String]?
    }

    public var store: StoreChoice = .auto
    public var providers: [String: Provider] = [:]
    /// How long the user's session stays locked (logind `LockedHint`) before the vault locks.
    public var sessionLockGraceSeconds: Double = 10

    public init() {}

    /// The presets PRODUCT.md names.
    public static let presets: Set<String> = ["github", "gitlab", "google", "microsoft"]

    /// Loads `path`; a missing file is the empty config.
    public static func load(path: String) throws(VaultError) -> Config {
        guard FileSystem.exists(path) else { return Config() }
        let bytes: [UInt8]
        do { bytes = try FileSystem.read(path, limit: 1 << 20) } catch { throw VaultError(.badInput, "cannot read config \(path): \(error)") }
        return try parse(bytes, source: path)
    }

    /// Decodes a config document; `source` names it in errors.
    public static func parse(_ bytes: [UInt8], source: String) throws(VaultError) -> Config {
        let json: JSON
        do { json = try JSON.parse(bytes) } catch { throw VaultError(.badInput, "config \(source): \(error)") }
        var d = Decoder(source: source)
        return try d.config(json)
    }

    private struct Decoder {
        let source: String

        func fail(_ path: String, _ message: String) -> VaultError {
            VaultError(.badInput, "config \(source): \(path): \(message)")
        }

        func object(_ v: JSON, _ path: String, allowed: Set<String>) throws(VaultError) -> JSONObject {
            guard let o = v.objectValue else { throw fail(path, "must be an object, got \(v.typeName)") }
            for k in o.keys where !allowed.contains(k) { throw fail(path.isEmpty ? k : "\(path).\(k)", "unknown key") }
            return o
        }

        func string(_ v: JSON, _ path: String) throws(VaultError) -> String {
            guard let s = v.stringValue else { throw fail(path, "must be a string, got \(v.typeName)") }
            return s
        }

        func number(_ v: JSON, _ path: String, min: Double) throws(VaultError) -> Double {
            guard let n = v.numberValue else { throw fail(path, "must be a number, got \(v.typeName)") }
            guard n >= min else { throw fail(path, "must be at least \(Int(min))") }
            return n
        }

        func strings(_ v: JSON, _ path: String) throws(VaultError) -> [String] {
            guard let a = v.arrayValue else { throw fail(path, "must be an array of strings, got \(v.typeName)") }
            var out: [String] = []
            for (i, e) in a.enumerated() { out.append(try string(e, "\(path)[\(i)]")) }
            return out
        }

        func stringMap(_ v: JSON, _ path: String) throws(VaultError) -> [String: String] {
            guard let o = v.objectValue else { throw fail(path, "must be an object of strings, got \(v.typeName)") }
            var out: [String: String] = [:]
            for (k, e) in o { out[k] = try string(e, "\(path).\(k)") }
            return out
        }

        /// An endpoint URL: https, or http only on a loopback address.
        func endpoint(_ v: JSON, _ path: String) throws(VaultError) -> String {
            let s = try string(v, path)
            if s.hasPrefix("https://") && s.count > 8 { return s }
            if s.hasPrefix("http://") {
                let rest = s.dropFirst(7)
                let host = rest.prefix { $0 != "/" && $0 != "?" }
                let hostOnly: Substring
                if host.hasPrefix("[") { hostOnly = host.prefix { $0 != "]" }.dropFirst() } else { hostOnly = host.prefix { $0 != ":" } }
                if hostOnly == "127.0.0.1" || hostOnly == "::1" || hostOnly == "localhost" || hostOnly.hasPrefix("127.") { return s }
                throw fail(path, "http:// is refused except on loopback addresses; use https://")
            }
            throw fail(path, "must be an https:// URL")
        }

        mutating func config(_ json: JSON) throws(VaultError) -> Config {
            let o = try object(json, "", allowed: ["store", "providers", "session_lock_grace_seconds"])
            var c = Config()
            if let s = o["store"] {
                let text = try string(s, "store")
                guard let choice = StoreChoice(rawValue: text) else { throw fail("store", "must be one of auto, sqlite, secret-service") }
                c.store = choice
            }
            if let g = o["session_lock_grace_seconds"] {
                let n = try number(g, "session_lock_grace_seconds", min: 0)
                guard n <= 86400 else { throw fail("session_lock_grace_seconds", "must be at most 86400 (one day)") }
                c.sessionLockGraceSeconds = n
            }
            if let p = o["providers"] {
                guard let providers = p.objectValue else { throw fail("providers", "must be an object, got \(p.typeName)") }
                for (name, value) in providers {
                    let path = "providers.\(name)"
                    do { try ItemName.validate(name, what: "provider") } catch { throw fail(path, error.message) }
                    c.providers[name] = try provider(value, path)
                }
            }
            return c
        }

        func provider(_ json: JSON, _ path: String) throws(VaultError) -> Provider {
            let o = try object(json, path, allowed: [
                "preset", "issuer", "authorization_endpoint", "token_endpoint", "revocation_endpoint",
                "device_authorization_endpoint", "grant", "client_id", "client_auth", "scopes", "authorization_params",
                "token_headers", "default_mode", "refresh_margin_seconds", "assume_lifetime_seconds", "allowed_clients",
                "notify_command",
            ])
            var p = Provider()
            for (key, v) in o {
                let kp = "\(path).\(key)"
                switch key {
                case "preset":
                    let s = try string(v, kp)
                    guard Config.presets.contains(s) else { throw fail(kp, "unknown preset; known: \(Config.presets.sorted().joined(separator: ", "))") }
                    p.preset = s
                case "issuer": p.issuer = try endpoint(v, kp)
                case "authorization_endpoint": p.authorizationEndpoint = try endpoint(v, kp)
                case "token_endpoint": p.tokenEndpoint = try endpoint(v, kp)
                case "revocation_endpoint": p.revocationEndpoint = try endpoint(v, kp)
                case "device_authorization_endpoint": p.deviceAuthorizationEndpoint = try endpoint(v, kp)
                case "grant":
                    let s = try string(v, kp)
                    guard ["authorization_code", "device_code", "client_credentials"].contains(s) else {
                        throw fail(kp, "must be one of authorization_code, device_code, client_credentials")
                    }
                    p.grant = s
                case "client_id": p.clientID = try string(v, kp)
                case "client_auth":
                    let s = try string(v, kp)
                    guard ["client_secret_basic", "client_secret_post", "none"].contains(s) else {
                        throw fail(kp, "must be one of client_secret_basic, client_secret_post, none")
                    }
                    p.clientAuth = s
                case "scopes": p.scopes = try strings(v, kp)
                case "authorization_params": p.authorizationParams = try stringMap(v, kp)
                case "token_headers": p.tokenHeaders = try stringMap(v, kp)
                case "default_mode":
                    let s = try string(v, kp)
                    guard let m = AccessMode(rawValue: s) else { throw fail(kp, "must be one of \(AccessMode.allNames)") }
                    p.defaultMode = m
                case "refresh_margin_seconds": p.refreshMarginSeconds = try number(v, kp, min: 0)
                case "assume_lifetime_seconds": p.assumeLifetimeSeconds = try number(v, kp, min: 1)
                case "allowed_clients":
                    let list = try strings(v, kp)
                    for (i, e) in list.enumerated() where !e.hasPrefix("/") { throw fail("\(kp)[\(i)]", "must be an absolute executable path") }
                    p.allowedClients = list
                case "notify_command":
                    let list = try strings(v, kp)
                    guard !list.isEmpty else { throw fail(kp, "must name a program") }
                    p.notifyCommand = list
                default: break
                }
            }
            return p
        }
    }
}
