import TokenVaultClient
import VaultModel

/// One `vaultctl` verb: parses and validates its arguments in `init`
/// (usage errors exit 64 before anything is sent), then `run`s.
protocol Command {
    /// The verb.
    static var name: String { get }
    /// One line for `vaultctl --help`.
    static var summary: String { get }
    /// The verb's own help text (after "Usage: vaultctl ").
    static var usage: String { get }
    /// Options that take a value.
    static var options: Set<String> { get }
    /// Options without a value.
    static var flags: Set<String> { get }

    init(_ args: Arguments) throws(VaultError)
    func run(_ client: TokenVaultClient) throws(TokenVaultError)
}

extension Command {
    static var options: Set<String> { [] }
    static var flags: Set<String> { [] }
}

/// Options every verb takes.
enum Common {
    static let options: Set<String> = ["--socket"]
    static let flags: Set<String> = ["--help", "-h"]
    static let help = """
          --socket PATH     the daemon's socket (TOKENVAULT_SOCKET; default $XDG_RUNTIME_DIR/tokenvault/socket)
          -h, --help        show this help
        """
}

/// `provider` and `--account` shared by the item verbs.
struct ItemArguments {
    let provider: String
    let account: String?

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals(["provider"])
        provider = args.positionals[0]
        try ItemName.validate(provider, what: "provider")
        account = args.value("--account")
        if let account { try ItemName.validate(account, what: "account") }
    }

    var params: [(String, JSON)] {
        var p: [(String, JSON)] = [("provider", .string(provider))]
        if let account { p.append(("account", .string(account))) }
        return p
    }
}

/// RFC 3339 text of an expiry, or "unknown".
func expiryText(_ seconds: Double?) -> String {
    seconds.map(WallClock.rfc3339) ?? "unknown"
}

extension Arguments {
    /// `--mode MODE`, if given: one of the seven access modes, else a usage error.
    func accessMode() throws(VaultError) -> AccessMode? {
        guard let m = value("--mode") else { return nil }
        guard let mode = AccessMode(rawValue: m) else {
            throw VaultError(.usage, "unknown mode \(ItemName.printable(m)); modes: \(AccessMode.allNames)")
        }
        return mode
    }
}
