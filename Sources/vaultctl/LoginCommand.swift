@preconcurrency import Glibc
import TokenVaultClient
import VaultModel
import VaultProtocol

/// `vaultctl login PROVIDER`: gets tokens without pasting JSON.
struct LoginCommand: Command {
    static let name = "login"
    static let summary = "log in to a provider (browser, --device, or client credentials)"
    static let usage = """
        login PROVIDER [--account NAME] [--mode MODE] [--device] [--no-browser] [--timeout SECONDS] [--json]

        Authorization code with PKCE over a loopback redirect on 127.0.0.1
        (RFC 8252, RFC 7636): prints the URL, opens the browser with xdg-open
        when there is a display (unless --no-browser), and waits (default 300 s).
        --device uses the device authorization grant (RFC 8628): shows a code to
        enter at the provider's page. Providers configured with
        "grant": "client_credentials" log in at once. The tokens are stored
        under MODE (default: the provider's default_mode, then
        after-first-unlock) and replace the item's old tokens.
        Ctrl-C cancels the login; nothing is stored.
        """
    static let options: Set<String> = ["--account", "--mode", "--timeout"]
    static let flags: Set<String> = ["--device", "--no-browser", "--json"]

    let item: ItemArguments
    let mode: AccessMode?
    let device: Bool
    let noBrowser: Bool
    let timeout: Double
    let json: Bool

    init(_ args: Arguments) throws(VaultError) {
        item = try ItemArguments(args)
        device = args.flag("--device")
        noBrowser = args.flag("--no-browser")
        json = args.flag("--json")
        mode = try args.accessMode()
        if let t = args.value("--timeout") {
            guard let n = Double(t), n >= 1, n <= 3600 else { throw VaultError(.usage, "--timeout needs 1 to 3600 seconds") }
            timeout = n
        } else {
            timeout = 300
        }
    }

    func run(_ client: TokenVaultClient) throws(TokenVaultError) {
        // The wait below lasts as long as the login: give the connection room.
        let waiting = TokenVaultClient(socketPath: client.socketPath, timeout: timeout + 30)
        var params = item.params
        if let mode { params.append(("mode", .string(mode.rawValue))) }
        params += [("device", .bool(device)), ("timeout", .number(timeout))]
        let start = try waiting.raw(.loginStart, params)
        if json { Output.json(start) }
        if start["done"]?.boolValue == true {
            report(start["result"] ?? .null)
            return
        }
        guard let session = start["session"]?.stringValue else { throw .protocolError("login_start answered without a session") }
        if let url = start["authorization_url"]?.stringValue {
            Output.err("Open this URL in a browser to log in to \(item.provider):\n\n  \(url)\n\nWaiting for the redirect to \(start["redirect_uri"]?.stringValue ?? "127.0.0.1") (Ctrl-C cancels)…\n")
            openBrowser(url)
        } else if let code = start["user_code"]?.stringValue, let uri = start["verification_uri"]?.stringValue {
            Output.err("To log in to \(item.provider), open\n\n  \(uri)\n\nand enter the code\n\n  \(code)\n\n")
            if let complete = start["verification_uri_complete"]?.stringValue {
                Output.err("(or open \(complete))\n")
                openBrowser(complete)
            }
            Output.err("Waiting for approval (Ctrl-C cancels)…\n")
        }
        report(try waiting.raw(.loginWait, [("session", .string(session))]))
    }

    private func report(_ r: JSON) {
        if json { Output.json(r); return }
        var line = "logged in: \(r["provider"]?.stringValue ?? item.provider)/\(r["account"]?.stringValue ?? "default") (\(r["mode"]?.stringValue ?? "?")), expires \(r["expires_at"]?.stringValue ?? "unknown")"
        if r["refresh_token"]?.boolValue == false { line += "; no refresh token was issued" }
        Output.out(line + "\n")
    }

    /// Runs `xdg-open URL` when a display is there and --no-browser was not given.
    private func openBrowser(_ url: String) {
        guard !noBrowser, getenv("DISPLAY") != nil || getenv("WAYLAND_DISPLAY") != nil else { return }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("xdg-open"), strdup(url), nil]
        defer { for p in argv { free(p) } }
        var pid: pid_t = 0
        if posix_spawnp(&pid, "xdg-open", &actions, nil, argv, environ) != 0 {
            Output.err("(could not start xdg-open; open the URL yourself)\n")
        }
    }
}
