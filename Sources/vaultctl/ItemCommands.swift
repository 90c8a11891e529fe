import VaultProtocol
@preconcurrency import Glibc
import TokenVaultClient
import VaultModel

/// `vaultctl list`: every item with its state.
struct ListCommand: Command {
    static let name = "list"
    static let summary = "list items with their mode, state and expiry"
    static let usage = """
        list [--json]

        States: valid, refreshing, expired, needs-reauth, locked.
        --json prints an array of objects with provider, account, mode, state,
        expires_at (RFC 3339 or null), backend, refreshable and note.
        """
    static let flags: Set<String> = ["--json"]

    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals([])
        json = args.flag("--json")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let r = try client.raw(.list)
        guard let items = r["items"]?.arrayValue else { throw .protocolError("list response without items") }
        if json { Output.json(.array(items)); return }
        if items.isEmpty { Output.out("no items\n"); return }
        Output.table(["PROVIDER", "ACCOUNT", "MODE", "STATE", "EXPIRES", "NOTE"], items.map { i in
            [i["provider"]?.stringValue ?? "?", i["account"]?.stringValue ?? "?", i["mode"]?.stringValue ?? "?",
             i["state"]?.stringValue ?? "?", i["expires_at"]?.stringValue ?? "unknown",
             i["note"]?.stringValue.map { "not refreshed: \($0)" } ?? ""]
        })
    }
}

/// `vaultctl revoke PROVIDER`: deletes an item.
struct RevokeCommand: Command {
    static let name = "revoke"
    static let summary = "revoke a token and delete it"
    static let usage = """
        revoke PROVIDER [--account NAME] [--local-only] [--keep-on-failure] [--json]

        Revokes the refresh token, then the access token, at the provider's
        RFC 7009 revocation endpoint when it has one, then deletes the item.
        A failed remote revocation is reported and the item is deleted anyway,
        unless --keep-on-failure. --local-only skips the provider.
        """
    static let options: Set<String> = ["--account"]
    static let flags: Set<String> = ["--local-only", "--keep-on-failure", "--json"]

    let item: ItemArguments
    let localOnly: Bool
    let keepOnFailure: Bool
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        item = try ItemArguments(args)
        localOnly = args.flag("--local-only")
        keepOnFailure = args.flag("--keep-on-failure")
        json = args.flag("--json")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let r = try client.raw(.revoke, item.params + [("local_only", .bool(localOnly)), ("keep_on_failure", .bool(keepOnFailure))])
        if json { Output.json(r); return }
        Output.out("deleted \(item.provider)/\(item.account ?? ItemName.defaultAccount); remote revocation: \(r["remote"]?.stringValue ?? "?")\n")
        if r["remote_failed"]?.boolValue == true { throw .temporary("remote revocation failed; the item was deleted locally") }
    }
}

/// `vaultctl report-401 PROVIDER`: a server refused the token.
struct Report401Command: Command {
    static let name = "report-401"
    static let summary = "report that a server answered 401 to the token"
    static let usage = """
        report-401 PROVIDER [--account NAME]

        The daemon refreshes the token, or marks the item needs-reauth when it
        cannot be refreshed.
        """
    static let options: Set<String> = ["--account"]

    let item: ItemArguments

    init(_ args: Arguments) throws(VaultError) { item = try ItemArguments(args) }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let r = try client.raw(.report401, item.params)
        Output.out("\(item.provider)/\(item.account ?? ItemName.defaultAccount): \(r["state"]?.stringValue ?? "?")\n")
    }
}
