import TokenVaultClient
import VaultModel
import VaultProtocol

/// `vaultctl migrate --to sqlite|secret-service`.
struct MigrateCommand: Command {
    static let name = "migrate"
    static let summary = "move every item to the other store (sqlite or secret-service)"
    static let usage = """
        migrate --to sqlite|secret-service [--json]

        Copies every item and key record (sealed as they are; nothing is
        re-encrypted) into the other store, moves the vault key of a vault
        without a passphrase between vault.key and the login collection,
        checks that every copy opens, then switches the daemon to the new
        store and removes the old one. A failure at any point leaves the old
        store complete and in use, and says what happened. Writes wait
        (exit 75) while it runs; reads go on. See docs/stores.md.
        """
    static let options: Set<String> = ["--to"]
    static let flags: Set<String> = ["--json"]
    let target: String
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals([])
        guard let to = args.value("--to") else { throw VaultError(.usage, "migrate needs --to sqlite or --to secret-service") }
        guard to == "sqlite" || to == "secret-service" else { throw VaultError(.usage, "--to must be sqlite or secret-service") }
        target = to
        json = args.flag("--json")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        // A migration of thousands of items into a Secret Service takes a while: wait up to an hour.
        let patient = TokenVaultClient(socketPath: client.socketPath, timeout: 3600)
        let r = try patient.raw(.migrate, [("to", .string(target))])
        if json { Output.json(r); return }
        var text = "migrated \(r["items"]?.numberValue.map { String(Int($0)) } ?? "?") item(s) from \(r["from"]?.stringValue ?? "?") to \(r["to"]?.stringValue ?? "?")"
        if r["vault_key_moved"]?.boolValue == true { text += " (with the vault key)" }
        text += " in \(r["seconds"]?.serializedString ?? "?") s\n"
        if let note = r["note"]?.stringValue { text += "warning: \(note)\n" }
        Output.out(text)
    }
}
