@preconcurrency import Glibc
import Foundation
import Testing

/// The end-to-end suite. Its tests start real `tokenvaultd` and `vaultctl`
/// processes, so they run one at a time: in parallel they would compete for
/// two cores and make the timing checks (frame timeouts, deadlines) flaky.
@Suite(.serialized) struct EndToEnd {}

/// The package and the binaries `swift build` left in `.build/debug`.
enum PackagePaths {
    /// Three folders above this file (Tests/EndToEndTests/DaemonHarness.swift).
    static let root: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()
    static let tokenvaultd = root + "/.build/debug/tokenvaultd"
    static let vaultctl = root + "/.build/debug/vaultctl"

    /// `name` found on `PATH` (or in the usual system folders), or nil.
    static func executable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let folders = path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
        return folders.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
}

/// A failure of the harness itself (a process that would not start or stop).
struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// What a finished process left: exit status, output, its pid.
struct CommandResult: CustomStringConvertible {
    /// The exit status, or 128 + signal if it died of a signal.
    let status: Int32
    let stdout: String
    let stderr: String
    let pid: Int32
    var description: String { "exit \(status), stdout \(stdout.debugDescription), stderr \(stderr.debugDescription)" }
}

/// Polls `condition` until it holds, or throws once `timeout` has passed.
/// The pause between polls is a polling interval, never the synchronisation.
func waitFor(_ what: String, timeout: Duration = .seconds(10), every interval: Duration = .milliseconds(20),
             _ condition: () throws -> Bool) throws {
    let deadline = ContinuousClock.now + timeout
    while true {
        if try condition() { return }
        if ContinuousClock.now >= deadline { throw HarnessError("timed out after \(timeout) waiting for \(what)") }
        usleep(UInt32(interval.components.attoseconds / 1_000_000_000_000 + interval.components.seconds * 1_000_000))
    }
}

/// A random string that cannot occur by chance in a log: the tests look for it there.
func distinctiveSecret(_ prefix: String) -> String {
    var g = SystemRandomNumberGenerator()
    return prefix + "-" + (0..<4).map { _ in String(g.next() as UInt64, radix: 36) }.joined()
}

/// A child process started with `posix_spawn` and reaped by its owner with
/// `waitpid`.
///
/// Not Foundation's `Process`: on Linux it learns of a child's end when a
/// socket it hands the child is closed, then calls a blocking `waitpid`.
/// systemd-socket-activate closes that socket when it execs tokenvaultd,
/// so `Process` blocked its monitor thread on a live daemon and never
/// noticed any later child exit.
final class ChildProcess {
    let pid: pid_t
    /// The exit status once reaped, or 128 + signal number.
    private(set) var exitStatus: Int32?

    /// Starts `executable` with standard input from `stdinPath` (or /dev/null)
    /// and standard output and error appended to the given files. No other
    /// descriptor of the test process is inherited.
    init(_ executable: String, _ arguments: [String], environment: [String: String],
         stdinPath: String?, stdoutPath: String, stderrPath: String) throws {
        let input = open(stdinPath ?? "/dev/null", O_RDONLY | O_CLOEXEC)
        let output = open(stdoutPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        let error = stderrPath == stdoutPath ? output : open(stderrPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        defer {
            for fd in Set([input, output, error]) where fd >= 0 { close(fd) }
        }
        guard input >= 0, output >= 0, error >= 0 else { throw HarnessError("cannot open the files for \(executable): \(String(cString: strerror(errno)))") }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, error, 2)
        // Close what the test process holds without close-on-exec (the runner's own descriptors).
        for fd in Self.inheritableDescriptors() where fd > 2 && fd != input && fd != output && fd != error {
            posix_spawn_file_actions_addclose(&actions, fd)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD] { sigaddset(&defaults, s) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid: pid_t = 0
        let r = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard r == 0 else { throw HarnessError("posix_spawn \(executable): \(String(cString: strerror(r)))") }
        self.pid = pid
    }

    deinit {
        if exitStatus == nil {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
        }
    }

    /// Descriptors of this process that a child would inherit.
    static func inheritableDescriptors() -> [Int32] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return names.compactMap { Int32($0) }.filter { fd in
            let flags = fcntl(fd, F_GETFD)
            return flags >= 0 && flags & FD_CLOEXEC == 0
        }
    }

    /// Whether it is still running (reaps it, without blocking, once it ended).
    var isRunning: Bool {
        if exitStatus != nil { return false }
        var status: Int32 = 0
        let r = waitpid(pid, &status, WNOHANG)
        guard r == pid else { return r == 0 }
        // WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift does not import.
        let signal = status & 0x7F
        exitStatus = signal == 0 ? (status >> 8) & 0xFF : 128 + signal
        return false
    }

    /// Waits at most `timeout` for it to end; SIGKILL and an error after that.
    @discardableResult
    func wait(timeout: Duration, what: String) throws -> Int32 {
        do {
            try waitFor(what, timeout: timeout, every: .milliseconds(5)) { !isRunning }
        } catch {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
            exitStatus = 128 + SIGKILL
            throw error
        }
        return exitStatus ?? -1
    }
}

/// One private vault for one test: a fresh folder under /tmp with a short
/// path (the socket's `sun_path` holds 108 bytes) that is `HOME` and every
/// XDG folder, the daemon started as a process on it, and `vaultctl` runs.
///
/// Every token and passphrase a test makes through the harness is
/// remembered, and `finish()` checks that none of them reached the daemon's
/// standard error, the audit log or any `vaultctl` error message.
final class DaemonHarness {
    let folder: String
    var runtimeDir: String { folder + "/run" }
    var dataHome: String { folder + "/data" }
    var configHome: String { folder + "/config" }
    var stateHome: String { folder + "/state" }
    /// The default socket: `$XDG_RUNTIME_DIR/tokenvault/socket`.
    var socketPath: String { runtimeDir + "/tokenvault/socket" }
    var auditLogPath: String { stateHome + "/tokenvault/audit.log" }

    /// Extra environment for the daemon only (`TOKENVAULT_FRAME_TIMEOUT_MS` …).
    /// Settable before `start()`, for values that name a file in `folder`.
    var daemonEnvironment: [String: String]
    /// The running daemon, if any.
    private(set) var daemon: ChildProcess?
    private var daemonLogPaths: [String] = []
    /// Tokens and passphrases that must never be logged.
    private(set) var secrets: [String] = []
    private var runs = 0
    /// Whether the daemon listens on the default socket (not an inherited one).
    private var defaultSocketExpected = false
    private var reportedMissingSocket = false
    private var finished = false

    init(daemonEnvironment: [String: String] = [:]) throws {
        var template = Array("/tmp/tve2e-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw HarnessError("mkdtemp: \(String(cString: strerror(errno)))")
        }
        folder = String(cString: made)
        self.daemonEnvironment = daemonEnvironment
        for sub in ["run", "data", "config", "state", "io"] {
            guard mkdir(folder + "/" + sub, 0o700) == 0, chmod(folder + "/" + sub, 0o700) == 0 else {
                throw HarnessError("mkdir \(folder)/\(sub): \(String(cString: strerror(errno)))")
            }
        }
    }

    deinit {
        if !finished { try? FileManager.default.removeItem(atPath: folder) }
    }

    /// The names this harness sets in every child's environment.
    static let environmentNames = ["HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"]

    /// The test process's environment without anything TokenVault or systemd
    /// would read, plus this vault's private folders.
    var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment.filter { k, _ in
            !k.hasPrefix("TOKENVAULT_") && !k.hasPrefix("LISTEN_") && !k.hasPrefix("XDG_") && k != "NOTIFY_SOCKET"
                && k != "DBUS_SESSION_BUS_ADDRESS"
        }
        env["HOME"] = folder
        env["XDG_RUNTIME_DIR"] = runtimeDir
        env["XDG_DATA_HOME"] = dataHome
        env["XDG_CONFIG_HOME"] = configHome
        env["XDG_STATE_HOME"] = stateHome
        return env
    }

    // MARK: - Secrets

    /// A new distinctive access token, remembered as a secret.
    func newToken(_ label: String = "tok") -> String {
        let t = distinctiveSecret("tv\(label)")
        secrets.append(t)
        return t
    }

    /// Remembers a secret made elsewhere (for example by a test's thread).
    func remember(_ secret: String) { secrets.append(secret) }

    /// Writes a new distinctive passphrase to a 0600 file; returns its path.
    func newPassphraseFile(_ name: String) throws -> String {
        let passphrase = distinctiveSecret("pass")
        secrets.append(passphrase)
        let path = folder + "/io/" + name
        guard FileManager.default.createFile(atPath: path, contents: Data((passphrase + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw HarnessError("cannot write \(path)")
        }
        return path
    }

    /// An RFC 6749 token response as JSON text.
    func tokenJSON(_ accessToken: String?, tokenType: String = "Bearer", expiresIn: Int? = 3600, refreshToken: String? = nil) -> String {
        var o: [String: Any] = ["token_type": tokenType, "scope": "read write"]
        if let accessToken { o["access_token"] = accessToken }
        if let expiresIn { o["expires_in"] = expiresIn }
        if let refreshToken { o["refresh_token"] = refreshToken }
        let data = try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    /// Adds a new token for `provider` with `vaultctl add` (token on stdin) and returns it.
    @discardableResult
    func addToken(_ provider: String, account: String? = nil, mode: String? = nil, expiresIn: Int? = 3600,
                  socket: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        let token = newToken()
        let refresh = newToken("refresh")
        var args = ["add", provider]
        if let account { args += ["--account", account] }
        if let mode { args += ["--mode", mode] }
        if let socket { args += ["--socket", socket] }
        let r = try vaultctl(args, stdin: tokenJSON(token, expiresIn: expiresIn, refreshToken: refresh))
        try #require(r.status == 0, "vaultctl add \(provider): \(r)", sourceLocation: sourceLocation)
        return token
    }

    // MARK: - The daemon

    /// The daemon's standard error, over every start.
    var daemonLog: String {
        daemonLogPaths.map { (try? String(contentsOfFile: $0, encoding: .utf8)) ?? "" }.joined()
    }

    /// The daemon's pid (it must be running).
    var daemonPID: Int32 { daemon?.pid ?? -1 }

    /// Starts `tokenvaultd` (through `launcher` when given, for example
    /// systemd-socket-activate) on this vault's folders, with its standard
    /// error in a file, and waits until `vaultctl status` answers on `socket`.
    func start(launcher: [String] = [], socket: String? = nil, timeout: Duration = .seconds(20)) throws {
        guard daemon == nil else { throw HarnessError("the daemon is already running") }
        let logPath = folder + "/daemon-\(daemonLogPaths.count + 1).log"
        let executable = launcher.first ?? PackagePaths.tokenvaultd
        let arguments = launcher.isEmpty ? [] : Array(launcher.dropFirst()) + [PackagePaths.tokenvaultd]
        let p = try ChildProcess(executable, arguments, environment: environment.merging(daemonEnvironment) { $1 },
                                 stdinPath: nil, stdoutPath: logPath, stderrPath: logPath)
        daemon = p
        daemonLogPaths.append(logPath)
        defaultSocketExpected = socket == nil
        let target = socket ?? socketPath
        try waitFor("tokenvaultd to answer on \(target)", timeout: timeout) {
            guard p.isRunning else {
                daemon = nil
                throw HarnessError("tokenvaultd exited with \(p.exitStatus ?? -1) before it was ready; its log:\n\(daemonLog)")
            }
            guard Self.isSocket(target) else { return false }
            return try vaultctl(["status", "--socket", target]).status == 0
        }
    }

    /// Sends SIGTERM, waits for the daemon to exit, and expects exit status 0.
    @discardableResult
    func stop(sourceLocation: SourceLocation = #_sourceLocation) throws -> Int32 {
        guard let p = daemon else { throw HarnessError("the daemon is not running") }
        daemon = nil
        kill(p.pid, SIGTERM)
        let status: Int32
        do {
            status = try p.wait(timeout: .seconds(15), what: "tokenvaultd to exit after SIGTERM")
        } catch {
            Issue.record("tokenvaultd did not exit within 15 s of SIGTERM; its log:\n\(daemonLog)", sourceLocation: sourceLocation)
            throw error
        }
        #expect(status == 0, "tokenvaultd should exit 0 after SIGTERM; its log:\n\(daemonLog)", sourceLocation: sourceLocation)
        return status
    }

    /// SIGTERM, then a new daemon on the same folders.
    func restart(sourceLocation: SourceLocation = #_sourceLocation) throws {
        try stop(sourceLocation: sourceLocation)
        try start()
    }

    /// Stops the daemon if it runs, checks that no secret reached a log, and
    /// removes the folder. Call it in a `defer` right after creating the harness.
    func finish(sourceLocation: SourceLocation = #_sourceLocation) {
        if daemon != nil { _ = try? stop(sourceLocation: sourceLocation) }
        let daemonLog = self.daemonLog
        let audit = (try? String(contentsOfFile: auditLogPath, encoding: .utf8)) ?? ""
        for secret in secrets {
            #expect(!daemonLog.contains(secret), "a secret reached the daemon's standard error", sourceLocation: sourceLocation)
            #expect(!audit.contains(secret), "a secret reached the audit log", sourceLocation: sourceLocation)
        }
        finished = true
        try? FileManager.default.removeItem(atPath: folder)
    }

    static func isSocket(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFSOCK
    }

    // MARK: - Commands

    /// Runs `vaultctl` with `arguments`, `stdin` as its standard input, in this vault's environment.
    func vaultctl(_ arguments: [String], stdin: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) throws -> CommandResult {
        let result = try run(PackagePaths.vaultctl, arguments, stdin: stdin, sourceLocation: sourceLocation)
        checkDaemonAlive(sourceLocation: sourceLocation)
        return result
    }

    /// Records an issue, with the daemon's log, if the daemon this harness
    /// started has ended without being stopped.
    func checkDaemonAlive(sourceLocation: SourceLocation = #_sourceLocation) {
        guard let d = daemon else { return }
        if d.isRunning {
            if !reportedMissingSocket && defaultSocketExpected && !Self.isSocket(socketPath) {
                reportedMissingSocket = true
                Issue.record("tokenvaultd (pid \(d.pid)) runs but its socket \(socketPath) is gone (folder still there: \(FileManager.default.fileExists(atPath: folder)))",
                             sourceLocation: sourceLocation)
            }
            return
        }
        daemon = nil
        Issue.record("tokenvaultd (pid \(d.pid)) ended on its own with status \(d.exitStatus ?? -1); its log:\n\(daemonLog)",
                     sourceLocation: sourceLocation)
    }

    /// Runs any program to completion (at most `timeout`) and collects what it
    /// left; its standard input is `stdin`, through a 0600 file, never argv.
    /// A secret in its standard error is recorded as an issue.
    func run(_ executable: String, _ arguments: [String], stdin: String? = nil, timeout: Duration = .seconds(30),
             sourceLocation: SourceLocation = #_sourceLocation) throws -> CommandResult {
        runs += 1
        let outPath = folder + "/io/out-\(runs)"
        let errPath = folder + "/io/err-\(runs)"
        var inPath: String?
        if let stdin {
            inPath = folder + "/io/in-\(runs)"
            guard FileManager.default.createFile(atPath: inPath!, contents: Data(stdin.utf8), attributes: [.posixPermissions: 0o600]) else {
                throw HarnessError("cannot write \(inPath!)")
            }
        }
        let p = try ChildProcess(executable, arguments, environment: environment, stdinPath: inPath, stdoutPath: outPath, stderrPath: errPath)
        let status = try p.wait(timeout: timeout, what: "\(executable) \(arguments.joined(separator: " ")) to exit")
        if let inPath { unlink(inPath) }
        let result = CommandResult(
            status: status,
            stdout: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "",
            pid: p.pid)
        for secret in secrets where result.stderr.contains(secret) {
            Issue.record("a secret reached the standard error of \(executable) \(arguments.joined(separator: " "))", sourceLocation: sourceLocation)
        }
        return result
    }

    // MARK: - Config file

    /// The config file the daemon reads: `$XDG_CONFIG_HOME/tokenvault/config.json`.
    var configPath: String { configHome + "/tokenvault/config.json" }

    /// Writes `text` as the daemon's config file (0600). Call it before
    /// `start()`, or send SIGHUP afterwards.
    func writeConfig(_ text: String) throws {
        let folder = configHome + "/tokenvault"
        if !FileManager.default.fileExists(atPath: folder) {
            guard mkdir(folder, 0o700) == 0 else { throw HarnessError("mkdir \(folder): \(String(cString: strerror(errno)))") }
        }
        guard FileManager.default.createFile(atPath: configPath, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw HarnessError("cannot write \(configPath)")
        }
    }

    // MARK: - Commands that wait (login)

    /// A `vaultctl` started without waiting for it: its output can be read while it runs.
    final class BackgroundCommand {
        let process: ChildProcess
        let stdoutPath: String
        let stderrPath: String
        init(process: ChildProcess, stdoutPath: String, stderrPath: String) {
            self.process = process
            self.stdoutPath = stdoutPath
            self.stderrPath = stderrPath
        }
        var pid: Int32 { process.pid }
        var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
        var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

        /// Waits until its standard error contains `text` (and fails at once if it ends first).
        func waitForStderr(_ text: String, timeout: Duration = .seconds(10)) throws {
            try waitFor("vaultctl to print \(text.debugDescription)", timeout: timeout) {
                if stderr.contains(text) { return true }
                guard process.isRunning else {
                    throw HarnessError("vaultctl ended with \(process.exitStatus ?? -1) before printing \(text.debugDescription): stdout \(stdout.debugDescription), stderr \(stderr.debugDescription)")
                }
                return false
            }
        }
    }

    /// Starts `vaultctl` with `arguments` in this vault's environment and returns at once.
    func spawnVaultctl(_ arguments: [String]) throws -> BackgroundCommand {
        runs += 1
        let outPath = folder + "/io/out-\(runs)"
        let errPath = folder + "/io/err-\(runs)"
        let p = try ChildProcess(PackagePaths.vaultctl, arguments, environment: environment, stdinPath: nil, stdoutPath: outPath, stderrPath: errPath)
        return BackgroundCommand(process: p, stdoutPath: outPath, stderrPath: errPath)
    }

    /// Waits for a background `vaultctl` to end and collects what it left,
    /// with the same secret check as `run`.
    func wait(for command: BackgroundCommand, timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation) throws -> CommandResult {
        let status = try command.process.wait(timeout: timeout, what: "background vaultctl (pid \(command.pid)) to exit")
        let result = CommandResult(status: status, stdout: command.stdout, stderr: command.stderr, pid: command.pid)
        for secret in secrets where result.stderr.contains(secret) {
            Issue.record("a secret reached the standard error of a background vaultctl", sourceLocation: sourceLocation)
        }
        checkDaemonAlive(sourceLocation: sourceLocation)
        return result
    }

    // MARK: - Reading output

    /// `vaultctl list --json`, parsed.
    func listJSON(sourceLocation: SourceLocation = #_sourceLocation) throws -> [[String: Any]] {
        let r = try vaultctl(["list", "--json"])
        try #require(r.status == 0, "vaultctl list --json: \(r)", sourceLocation: sourceLocation)
        let parsed = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8))
        return try #require(parsed as? [[String: Any]], "list --json must print an array of objects: \(r.stdout)", sourceLocation: sourceLocation)
    }

    /// `vaultctl status --json`, parsed.
    func statusJSON(sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
        let r = try vaultctl(["status", "--json"])
        try #require(r.status == 0, "vaultctl status --json: \(r)", sourceLocation: sourceLocation)
        let parsed = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8))
        return try #require(parsed as? [String: Any], sourceLocation: sourceLocation)
    }

    /// The `list --json` state of `provider`, nil if it is not listed.
    func state(of provider: String) throws -> String? {
        try listJSON().first { $0["provider"] as? String == provider }?["state"] as? String
    }
}
