import VaultProtocol
import TokenVaultClient
import VaultModel

/// Prints a status object as `key: value` lines, or as JSON.
func printStatus(_ r: JSON, json: Bool) {
    if json { Output.json(r); return }
    guard let o = r.objectValue else { Output.json(r); return }
    var s = ""
    for (k, v) in o {
        let text: String
        switch v {
        case .string(let t): text = t
        case .bool(let b): text = b ? "yes" : "no"
        default: text = v.serializedString
        }
        s += "\(k.replacingUnderscores()): \(text)\n"
    }
    Output.out(s)
}

extension String {
    func replacingUnderscores() -> String { String(map { $0 == "_" ? " " : $0 }) }
}

/// `vaultctl status`.
struct StatusCommand: Command {
    static let name = "status"
    static let summary = "show the lock state, the store in use and why"
    static let usage = "status [--json]"
    static let flags: Set<String> = ["--json"]
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals([])
        json = args.flag("--json")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        printStatus(try client.raw(.status), json: json)
    }
}

/// `vaultctl lock`.
struct LockCommand: Command {
    static let name = "lock"
    static let summary = "lock the vault (when-unlocked* items become unavailable)"
    static let usage = "lock [--json]"
    static let flags: Set<String> = ["--json"]
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals([])
        json = args.flag("--json")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let r = try client.raw(.lock)
        if json { Output.json(r) } else { Output.out("vault \(r["lock_state"]?.stringValue ?? "?")\n") }
    }
}

/// `vaultctl unlock`.
struct UnlockCommand: Command {
    static let name = "unlock"
    static let summary = "unlock the vault"
    static let usage = """
        unlock [--passphrase-fd N | --passphrase-file PATH] [--json]

        Asks for the passphrase on the terminal unless it comes from a file
        descriptor or a file (first line). Never from the command line.
        A vault without a passphrase unlocks without one.
        """
    static let options: Set<String> = ["--passphrase-fd", "--passphrase-file"]
    static let flags: Set<String> = ["--json"]
    let args: Arguments

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals([])
        self.args = args
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let status = try client.raw(.status)
        var params: [(String, JSON)] = []
        if status["has_passphrase"]?.boolValue == true {
            do { params.append(("passphrase", .string(try PassphraseSource.read(args, prompt: "Vault passphrase: ")))) } catch { throw TokenVaultError(error) }
        }
        let r = try client.raw(.unlock, params)
        if args.flag("--json") { Output.json(r) } else { Output.out("vault \(r["lock_state"]?.stringValue ?? "?")\n") }
    }
}

/// `vaultctl init`.
struct InitCommand: Command {
    static let name = "init"
    static let summary = "create the vault, with a passphrase or --no-passphrase"
    static let usage = """
        init [--passphrase-fd N | --passphrase-file PATH | --no-passphrase] [--json]

        Creates the vault. Without init, the first add creates a vault without
        a passphrase. A passphrase is needed for when-passcode-set-this-device-only.
        """
    static let options: Set<String> = ["--passphrase-fd", "--passphrase-file"]
    static let flags: Set<String> = ["--no-passphrase", "--json"]
    let args: Arguments

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals([])
        if args.flag("--no-passphrase") && (args.value("--passphrase-fd") != nil || args.value("--passphrase-file") != nil) {
            throw VaultError(.usage, "--no-passphrase cannot be combined with a passphrase option")
        }
        self.args = args
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        var params: [(String, JSON)] = []
        if !args.flag("--no-passphrase") {
            do { params.append(("passphrase", .string(try newPassphrase(args)))) } catch { throw TokenVaultError(error) }
        }
        let r = try client.raw(.initialize, params)
        if args.flag("--json") { Output.json(r) } else { Output.out("vault created (\(r["has_passphrase"]?.boolValue == true ? "with" : "without") a passphrase), \(r["lock_state"]?.stringValue ?? "?")\n") }
    }
}

/// A new passphrase: from the options, or typed twice on the terminal.
func newPassphrase(_ args: Arguments) throws(VaultError) -> String {
    if args.value("--passphrase-fd") != nil || args.value("--passphrase-file") != nil {
        return try PassphraseSource.read(args, prompt: "")
    }
    let first = try PassphraseSource.read(args, prompt: "New vault passphrase: ")
    let second = try PassphraseSource.read(args, prompt: "Repeat it: ")
    guard first == second else { throw VaultError(.usage, "the two passphrases differ") }
    return first
}

/// `vaultctl passphrase set|change|remove`.
struct PassphraseCommand: Command {
    static let name = "passphrase"
    static let summary = "set, change or remove the vault passphrase"
    static let usage = """
        passphrase set    [--passphrase-fd N | --passphrase-file PATH]
        passphrase change [--old-passphrase-fd N | --old-passphrase-file PATH] [--passphrase-fd N | --passphrase-file PATH]
        passphrase remove [--passphrase-fd N | --passphrase-file PATH]

        set adds a passphrase to a vault without one (the vault must be unlocked).
        change needs the old passphrase. remove needs the current one, puts the
        vault key beside the device key, and deletes every
        when-passcode-set-this-device-only item.
        Only the class keys are re-wrapped; no item is re-encrypted.
        """
    static let options: Set<String> = ["--passphrase-fd", "--passphrase-file", "--old-passphrase-fd", "--old-passphrase-file"]
    static let flags: Set<String> = ["--json"]
    let action: String
    let args: Arguments

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals(["action"])
        action = args.positionals[0]
        guard ["set", "change", "remove"].contains(action) else { throw VaultError(.usage, "passphrase needs set, change or remove") }
        self.args = args
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let r: JSON
        do throws(VaultError) {
            switch action {
            case "set":
                r = try call(client, .passphraseSet, [("passphrase", .string(try newPassphrase(args)))])
            case "change":
                let old = try PassphraseSource.read(args, prompt: "Current vault passphrase: ", fdOption: "--old-passphrase-fd", fileOption: "--old-passphrase-file")
                r = try call(client, .passphraseChange, [("old", .string(old)), ("new", .string(try newPassphrase(args)))])
            default:
                let current = try PassphraseSource.read(args, prompt: "Current vault passphrase: ")
                r = try call(client, .passphraseRemove, [("passphrase", .string(current))])
            }
        } catch {
            throw TokenVaultError(error)
        }
        if args.flag("--json") { Output.json(r) } else { Output.out("passphrase \(action == "set" ? "set" : action == "change" ? "changed" : "removed")\n") }
    }

    private func call(_ client: TokenVaultClient, _ op: Operation, _ params: [(String, JSON)]) throws(VaultError) -> JSON {
        do { return try client.raw(op, params) } catch { throw VaultError(error.code, error.message) }
    }
}
