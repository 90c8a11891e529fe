import Foundation
import VaultModel

/// Tells the user that an item needs a new login: the provider's
/// `notify_command` (provider and account in its environment, never a
/// token) and, where a desktop session exists, `notify-send`.
public final class Notifier: Sendable {
    let logger: Logger

    public init(logger: Logger) { self.logger = logger }

    public func needsReauth(provider: String, account: String, reason: String, command: [String]?) {
        let message = "\(provider)/\(account) needs a new login: vaultctl login \(provider)"
        if let command, let program = command.first {
            var env = ProcessInfo.processInfo.environment
            env["TOKENVAULT_EVENT"] = "needs-reauth"
            env["TOKENVAULT_PROVIDER"] = provider
            env["TOKENVAULT_ACCOUNT"] = account
            env["TOKENVAULT_MESSAGE"] = message
            run(program, Array(command.dropFirst()), env: env, what: "notify_command of \(provider)")
        }
        let env = ProcessInfo.processInfo.environment
        if env["DBUS_SESSION_BUS_ADDRESS"] != nil, env["DISPLAY"] != nil || env["WAYLAND_DISPLAY"] != nil,
           let notifySend = Self.which("notify-send") {
            run(notifySend, ["--app-name=TokenVault", "TokenVault", message], env: env, what: "notify-send")
        }
    }

    private func run(_ program: String, _ args: [String], env: [String: String], what: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: program.hasPrefix("/") ? program : (Self.which(program) ?? program))
        p.arguments = args
        p.environment = env
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        let logger = self.logger
        p.terminationHandler = { proc in
            if proc.terminationStatus != 0 { logger.warning("\(what) exited with status \(proc.terminationStatus)") }
        }
        do { try p.run() } catch { logger.warning("cannot run \(what): \(error)") }
    }

    static func which(_ name: String) -> String? {
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let path = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }
}
