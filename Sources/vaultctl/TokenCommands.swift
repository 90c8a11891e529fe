import VaultProtocol
@preconcurrency import Glibc
import TokenVaultClient
import VaultModel

/// `vaultctl token PROVIDER`: prints the access token and a newline.
struct TokenCommand: Command {
    static let name = "token"
    static let summary = "print a provider's access token"
    static let usage = """
        token PROVIDER [--account NAME] [--min-validity SECONDS] [--json]

        Prints the access token and a newline. With --min-validity, a token that
        expires sooner is refused (exit 5) rather than served.
        """
    static let options: Set<String> = ["--account", "--min-validity"]
    static let flags: Set<String> = ["--json"]

    let item: ItemArguments
    let minValidity: Double
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        item = try ItemArguments(args)
        json = args.flag("--json")
        if let v = args.value("--min-validity") {
            guard let n = Double(v), n >= 0, n.isFinite else { throw VaultError(.usage, "--min-validity needs a number of seconds") }
            minValidity = n
        } else {
            minValidity = 0
        }
    }

    func fetch(_ client: TokenVaultClient) throws(TokenVaultError) -> Token {
        try client.token(provider: item.provider, account: item.account, minValidity: minValidity)
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let t = try fetch(client)
        if json {
            Output.json(.object(JSONObject([("provider", .string(t.provider)), ("account", .string(t.account)),
                                            ("access_token", .string(t.accessToken)), ("token_type", "Bearer"),
                                            ("expires_at", t.expiresAt.map { .string(WallClock.rfc3339($0)) } ?? .null)])))
        } else {
            Output.out(t.accessToken + "\n")
        }
    }
}

/// `vaultctl header PROVIDER`: prints `Authorization: Bearer TOKEN`.
struct HeaderCommand: Command {
    static let name = "header"
    static let summary = "print an Authorization header (for curl -H @<(vaultctl header P))"
    static let usage = """
        header PROVIDER [--account NAME] [--min-validity SECONDS] [--json]

        Prints "Authorization: Bearer TOKEN" and a newline, for example:
          curl -H @<(vaultctl header github) https://api.github.com/user
        """
    static let options = TokenCommand.options
    static let flags = TokenCommand.flags

    let token: TokenCommand

    init(_ args: Arguments) throws(VaultError) { token = try TokenCommand(args) }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        let t = try token.fetch(client)
        let header = "Authorization: " + t.bearerValue
        if token.json {
            Output.json(.object(JSONObject([("header", .string(header)),
                                            ("expires_at", t.expiresAt.map { .string(WallClock.rfc3339($0)) } ?? .null)])))
        } else {
            Output.out(header + "\n")
        }
    }
}

/// `vaultctl add PROVIDER`: stores a token response read from standard input.
struct AddCommand: Command {
    static let name = "add"
    static let summary = "store a token response (JSON on standard input)"
    static let usage = """
        add PROVIDER [--account NAME] [--mode MODE] [--json] < token.json

        Reads an RFC 6749 token response ({"access_token", "token_type",
        "expires_in", "refresh_token", "scope", …}) as JSON on standard input.
        Tokens are never taken on the command line. MODE is one of:
          \(AccessMode.allNames)
        (default: the provider's default_mode, then after-first-unlock).
        """
    static let options: Set<String> = ["--account", "--mode"]
    static let flags: Set<String> = ["--json"]

    let item: ItemArguments
    let mode: AccessMode?
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        item = try ItemArguments(args)
        json = args.flag("--json")
        mode = try args.accessMode()
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        var input: [UInt8]
        do { input = try StandardInput.readAll(limit: 60 * 1024) } catch { throw TokenVaultError(error) }
        defer { for i in input.indices { input[i] = 0 } }
        let body: JSON
        do { body = try JSON.parse(input) } catch { throw .badInput("standard input is not a JSON token response: \(error)") }
        var params = item.params
        if let mode { params.append(("mode", .string(mode.rawValue))) }
        params.append(("token_response", body))
        let r = try client.raw(.add, params)
        if json { Output.json(r); return }
        let expires = r["expires_at"]?.stringValue ?? "unknown"
        var line = "added \(r["provider"]?.stringValue ?? item.provider)/\(r["account"]?.stringValue ?? "default") (\(r["mode"]?.stringValue ?? "?")), expires \(expires)"
        if r["refreshable"]?.boolValue == false { line += "; it will not be refreshed automatically" }
        Output.out(line + "\n")
    }
}

/// Reading standard input without Foundation.
enum StandardInput {
    static func readAll(limit: Int) throws(VaultError) -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        defer { for i in buf.indices { buf[i] = 0 } }
        while true {
            let n = buf.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; throw VaultError(.failure, "cannot read standard input") }
            if n == 0 { break }
            out += buf[0..<n]
            if out.count > limit { throw VaultError(.badInput, "standard input is larger than \(limit / 1024) KiB") }
        }
        return out
    }
}
