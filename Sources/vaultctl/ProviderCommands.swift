import TokenVaultClient
import VaultModel
import VaultProtocol

/// `vaultctl refresh PROVIDER`: refresh now.
struct RefreshCommand: Command {
    static let name = "refresh"
    static let summary = "refresh a token now"
    static let usage = """
        refresh PROVIDER [--account NAME] [--json]

        Asks the provider for a new access token now (the daemon also does
        this by itself before tokens expire).
        """
    static let options: Set<String> = ["--account"]
    static let flags: Set<String> = ["--json"]

    let item: ItemArguments
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        item = try ItemArguments(args)
        json = args.flag("--json")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let r = try client.raw(.refresh, item.params)
        if json { Output.json(r); return }
        Output.out("refreshed \(item.provider)/\(item.account ?? ItemName.defaultAccount), expires \(r["expires_at"]?.stringValue ?? "unknown")\n")
    }
}

/// `vaultctl client-secret set PROVIDER`: the client secret, from standard input.
struct ClientSecretCommand: Command {
    static let name = "client-secret"
    static let summary = "keep a provider's client secret in the vault (from stdin)"
    static let usage = """
        client-secret set PROVIDER < secret.txt

        Reads the client secret from standard input (first line) and keeps it
        sealed in the vault, never in the config file or on the command line.
        """

    let provider: String

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals(["action", "provider"])
        guard args.positionals[0] == "set" else { throw VaultError(.usage, "client-secret needs set") }
        provider = args.positionals[1]
        try ItemName.validate(provider, what: "provider")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        var input: [UInt8]
        do { input = try StandardInput.readAll(limit: 8192) } catch { throw TokenVaultError(error) }
        defer { for i in input.indices { input[i] = 0 } }
        if let nl = input.firstIndex(of: 0x0A) { input.removeSubrange(nl...) }
        if input.last == 0x0D { input.removeLast() }
        guard !input.isEmpty, let secret = String(validating: input, as: UTF8.self) else {
            throw .badInput("no client secret on standard input")
        }
        let r = try client.raw(.clientSecretSet, [("provider", .string(provider)), ("secret", .string(secret))])
        Output.out("client secret of \(provider) stored (\(r["mode"]?.stringValue ?? "?"))\n")
    }
}

/// `vaultctl providers`: configured providers and their endpoints.
struct ProvidersCommand: Command {
    static let name = "providers"
    static let summary = "list configured providers (--check runs discovery)"
    static let usage = """
        providers [--check] [--json]

        Lists the providers of the config with their grant, endpoints and
        whether a client secret is stored. --check resolves every provider,
        running RFC 8414 discovery for those with an issuer.
        """
    static let flags: Set<String> = ["--check", "--json"]

    let check: Bool
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        try args.expectPositionals([])
        check = args.flag("--check")
        json = args.flag("--json")
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let r = try client.raw(.providers, [("check", .bool(check))])
        let list = r["providers"]?.arrayValue ?? []
        if json { Output.json(.array(list)); return }
        if list.isEmpty { Output.out("no providers in the config\n"); return }
        Output.table(["PROVIDER", "GRANT", "TOKEN ENDPOINT", "SECRET", "ITEMS"] + (check ? ["CHECK"] : []), list.map { p in
            var row = [p["provider"]?.stringValue ?? "?", p["grant"]?.stringValue ?? "?",
                       p["token_endpoint"]?.stringValue ?? (p["issuer"]?.stringValue.map { "(discovered from \($0))" } ?? "-"),
                       p["has_client_secret"]?.boolValue == true ? "yes" : "no", p["items"]?.serializedString ?? "0"]
            if check { row.append(p["check"]?.stringValue ?? "") }
            return row
        })
        if check, list.contains(where: { ($0["check"]?.stringValue ?? "ok") != "ok" }) {
            throw .failure("some providers failed the check")
        }
    }
}
