import VaultModel
import VaultProtocol
import VaultSystem

/// The daemon's command line and environment, resolved into paths
/// (PRODUCT.md section 1: XDG folders, each overridable by a flag and an
/// environment variable).
public struct DaemonOptions: Sendable {
    public var socketPath: String
    /// Whether the socket path is the default one (its folder is then created 0700 and checked).
    public var socketIsDefault: Bool
    public var configPath: String
    public var dataFolder: String
    public var auditLogPath: String
    public var storeChoice: String?
    public var storeChoiceSource: String?
    public var logLevel: Logger.Level = .info
    public var limits = SocketServer.Limits()

    public static let usage = """
        Usage: tokenvaultd [options]

        The TokenVault daemon: keeps OAuth tokens sealed and serves them over a
        Unix socket. Runs in the foreground and logs to standard error.

        Options:
          --socket PATH      socket to listen on      (TOKENVAULT_SOCKET; default $XDG_RUNTIME_DIR/tokenvault/socket)
          --config PATH      config file              (TOKENVAULT_CONFIG; default $XDG_CONFIG_HOME/tokenvault/config.json)
          --store KIND       auto, sqlite or secret-service (TOKENVAULT_STORE; then the config; default auto)
          --data-dir DIR     vault.db and key files   (TOKENVAULT_DATA_DIR; default $XDG_DATA_HOME/tokenvault)
          --audit-log PATH   audit log                (TOKENVAULT_AUDIT_LOG; default $XDG_STATE_HOME/tokenvault/audit.log)
          --log-level LEVEL  error, warning, info, debug (TOKENVAULT_LOG_LEVEL; default info)
          -h, --help         show this help
          --version          show the version

        Signals: SIGTERM or SIGINT stop it cleanly (exit 0); SIGHUP reloads the config.
        Socket activation: a listening socket passed by systemd (LISTEN_FDS) is used instead of --socket.
        """

    /// Parses `arguments` (without the program name). Throws `usage` errors.
    public static func parse(_ arguments: [String]) throws(VaultError) -> DaemonOptions {
        var flags: [String: String] = [:]
        var i = 0
        let valued: Set<String> = ["--socket", "--config", "--store", "--data-dir", "--audit-log", "--log-level"]
        while i < arguments.count {
            let a = arguments[i]
            var name = a
            var value: String?
            if let eq = a.firstIndex(of: "="), a.hasPrefix("--") {
                name = String(a[..<eq])
                value = String(a[a.index(after: eq)...])
            }
            guard valued.contains(name) else { throw VaultError(.usage, "unknown option \(ItemName.printable(a))") }
            if value == nil {
                i += 1
                guard i < arguments.count else { throw VaultError(.usage, "\(name) needs a value") }
                value = arguments[i]
            }
            flags[name] = value
            i += 1
        }
        let home = Environment.home
        let dataHome = Environment.get("XDG_DATA_HOME") ?? home + "/.local/share"
        let configHome = Environment.get("XDG_CONFIG_HOME") ?? home + "/.config"
        let stateHome = Environment.get("XDG_STATE_HOME") ?? home + "/.local/state"
        let explicitSocket = flags["--socket"] ?? Environment.get("TOKENVAULT_SOCKET")
        var o = DaemonOptions(
            socketPath: SocketPath.resolve(override: explicitSocket),
            socketIsDefault: explicitSocket == nil,
            configPath: flags["--config"] ?? Environment.get("TOKENVAULT_CONFIG") ?? configHome + "/tokenvault/config.json",
            dataFolder: flags["--data-dir"] ?? Environment.get("TOKENVAULT_DATA_DIR") ?? dataHome + "/tokenvault",
            auditLogPath: flags["--audit-log"] ?? Environment.get("TOKENVAULT_AUDIT_LOG") ?? stateHome + "/tokenvault/audit.log")
        if let s = flags["--store"] {
            o.storeChoice = s
            o.storeChoiceSource = "--store"
        } else if let s = Environment.get("TOKENVAULT_STORE") {
            o.storeChoice = s
            o.storeChoiceSource = "TOKENVAULT_STORE"
        }
        if let level = flags["--log-level"] ?? Environment.get("TOKENVAULT_LOG_LEVEL") {
            guard let l = Logger.Level(name: level) else { throw VaultError(.usage, "--log-level must be error, warning, info or debug") }
            o.logLevel = l
        }
        // Tuning knobs for tests and unusual deployments.
        if let v = Environment.get("TOKENVAULT_FRAME_TIMEOUT_MS"), let n = Int32(v), n > 0 { o.limits.frameTimeoutMs = n }
        if let v = Environment.get("TOKENVAULT_IDLE_TIMEOUT_MS"), let n = Int32(v), n > 0 { o.limits.idleTimeoutMs = n }
        if let v = Environment.get("TOKENVAULT_MAX_CONNECTIONS"), let n = Int(v), n > 0 { o.limits.maxConnections = n }
        return o
    }
}
