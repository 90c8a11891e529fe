@preconcurrency import Glibc
import Foundation
import Synchronization
import Testing
import VaultModel
import VaultStore

/// A failure of the test's own plumbing.
struct SetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The path of a program on PATH or in the usual folders.
func findProgram(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let folders = path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    return folders.map { $0 + "/" + name }.first { access($0, X_OK) == 0 }
}

/// A fresh folder under /tmp (short: socket paths must fit in 108 bytes).
func makeTemporaryFolder(_ prefix: String = "tvss") throws -> String {
    var template = Array("/tmp/\(prefix).XXXXXX".utf8CString)
    guard let folder = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!).map { String(cString: $0) } }) else {
        throw SetupError("mkdtemp: \(String(cString: strerror(errno)))")
    }
    return folder
}

/// Runs a program to completion and returns (status, stdout, stderr).
@discardableResult
func runProgram(_ program: String, _ arguments: [String], environment: [String: String]? = nil, stdin: String? = nil) throws -> (status: Int32, out: String, err: String) {
    guard let executable = program.hasPrefix("/") ? program : findProgram(program) else { throw SetupError("\(program) is not installed") }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let out = Pipe(), err = Pipe(), input = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    let errData = Mutex(Data())
    let errDone = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        let data = err.fileHandleForReading.readDataToEndOfFile()
        errData.withLock { $0 = data }
        errDone.signal()
    }
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    errDone.wait()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData.withLock { $0 }, as: UTF8.self))
}

/// A long-lived helper process whose standard input we hold: when the test
/// process ends (even killed), its stdin closes and the helper tears down.
final class HeldProcess: @unchecked Sendable {  // used by the one test (or fixture) that made it, one call at a time
    let process = Process()
    let stdin = Pipe()
    let stdout = Pipe()

    init(_ executable: String, _ arguments: [String], environment: [String: String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
    }

    private var seen: [UInt8] = []

    private func lines(_ buffer: [UInt8]) -> [Substring] {
        seen = buffer
        return String(decoding: buffer, as: UTF8.self).split(separator: "\n")
    }

    /// Reads stdout until a line starting with `prefix`, within `seconds`
    /// (lines read by an earlier call count too).
    func waitForLine(_ prefix: String, seconds: Double) throws -> String {
        if let line = String(decoding: seen, as: UTF8.self).split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) {
            return String(line.dropFirst(prefix.count))
        }
        let handle = stdout.fileHandleForReading
        let fd = handle.fileDescriptor
        var buffer: [UInt8] = seen
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, 100) <= 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { break }
            buffer += chunk[0..<n]
            if let line = lines(buffer).first(where: { $0.hasPrefix(prefix) }) { return String(line.dropFirst(prefix.count)) }
        }
        throw SetupError("no \(prefix) line from \(process.executableURL?.path ?? "?") within \(seconds) s")
    }

    func stop() {
        try? stdin.fileHandleForWriting.close()
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

/// A private Secret Service for the tests: gnome-keyring-daemon in its own
/// `dbus-run-session`, with private HOME and XDG folders and no display, so
/// nothing can prompt and the user's real keyring is never touched
/// (LINUX-NOTES recipe: `--unlock` from stdin, then `gdbus wait`).
/// One per test process; this process's `DBUS_SESSION_BUS_ADDRESS` points
/// at it before any libsecret call.
final class PrivateKeyring: Sendable {
    static let password = "tokenvault-test-keyring"
    static let collection = "/org/freedesktop/secrets/collection/login"
    let address: String
    let folder: String
    private let helper: HeldProcess

    /// Whether the programs the fixture needs are installed.
    static var toolsPresent: Bool {
        ["dbus-run-session", "gnome-keyring-daemon", "gdbus", "secret-tool"].allSatisfy { findProgram($0) != nil }
    }

    static let shared: Result<PrivateKeyring, SetupError> = {
        do { return .success(try PrivateKeyring()) } catch let e as SetupError { return .failure(e) } catch { return .failure(SetupError("\(error)")) }
    }()

    /// The shared keyring, or a setup failure.
    static func get() throws -> PrivateKeyring { try shared.get() }

    private init() throws {
        folder = try makeTemporaryFolder("tvkr")
        for sub in ["home", "data", "config"] { try FileManager.default.createDirectory(atPath: folder + "/" + sub, withIntermediateDirectories: true) }
        mkdir(folder + "/run", 0o700)
        let script = """
            set -e
            printf '%s' "$TV_KEYRING_PASSWORD" | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
            gdbus wait --session --timeout 5 org.freedesktop.secrets
            echo "ADDRESS=$DBUS_SESSION_BUS_ADDRESS"
            cat >/dev/null
            """
        var env = ProcessInfo.processInfo.environment
        env["DISPLAY"] = nil
        env["WAYLAND_DISPLAY"] = nil
        env["DBUS_SESSION_BUS_ADDRESS"] = nil
        env["HOME"] = folder + "/home"
        env["XDG_RUNTIME_DIR"] = folder + "/run"
        env["XDG_DATA_HOME"] = folder + "/data"
        env["XDG_CONFIG_HOME"] = folder + "/config"
        env["TV_KEYRING_PASSWORD"] = Self.password
        guard let runSession = findProgram("dbus-run-session") else { throw SetupError("dbus-run-session is not installed") }
        helper = try HeldProcess(runSession, ["--", "/bin/sh", "-c", script], environment: env)
        address = try helper.waitForLine("ADDRESS=", seconds: 15)
        setenv("DBUS_SESSION_BUS_ADDRESS", address, 1)
    }

    /// The environment for a tool or daemon that uses this keyring.
    var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        env["DISPLAY"] = nil
        env["WAYLAND_DISPLAY"] = nil
        return env
    }

    /// Locks the login collection from outside (`org.freedesktop.Secret.Service.Lock`).
    func lock() throws {
        let r = try runProgram("gdbus", ["call", "--session", "--dest", "org.freedesktop.secrets", "--object-path", "/org/freedesktop/secrets",
                                         "--method", "org.freedesktop.Secret.Service.Lock", "['\(Self.collection)']"], environment: environment)
        guard r.status == 0 else { throw SetupError("Lock failed: \(r.err)") }
    }

    /// Unlocks it without a prompt: gnome-keyring's private `UnlockWithMasterPassword` (tests only).
    func unlock() throws {
        let script = """
            import dbus, sys
            bus = dbus.SessionBus()
            svc = bus.get_object('org.freedesktop.secrets', '/org/freedesktop/secrets')
            _, session = svc.OpenSession('plain', dbus.String('', variant_level=1), dbus_interface='org.freedesktop.Secret.Service')
            iface = dbus.Interface(svc, 'org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface')
            iface.UnlockWithMasterPassword(sys.argv[1], (session, dbus.ByteArray(b''), dbus.ByteArray(sys.argv[2].encode()), 'text/plain'))
            """
        let r = try runProgram("/usr/bin/python3", ["-c", script, Self.collection, Self.password], environment: environment)
        guard r.status == 0 else { throw SetupError("UnlockWithMasterPassword failed: \(r.err)") }
    }

    /// `secret-tool search --all` for `attributes`: one dictionary per item
    /// (attribute.* keys without the prefix, plus "secret" for an unlocked item).
    func search(_ attributes: [String: String]) throws -> [[String: String]] {
        // secret-tool prints attributes on stderr: merge the two in order.
        var args = ["-c", "exec secret-tool search --all \"$@\" 2>&1", "secret-tool"]
        for (k, v) in attributes.sorted(by: { $0.key < $1.key }) { args += [k, v] }
        let r = try runProgram("/bin/sh", args, environment: environment)
        var items: [[String: String]] = []
        var current: [String: String]?
        for line in r.out.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("[") { if let c = current { items.append(c) }; current = [:]; continue }
            guard let eq = line.range(of: " = ") else { continue }
            let key = String(line[..<eq.lowerBound]), value = String(line[eq.upperBound...])
            if key.hasPrefix("attribute.") { current?[String(key.dropFirst("attribute.".count))] = value } else { current?[key] = value }
        }
        if let c = current { items.append(c) }
        return items
    }

    /// Every byte secret-tool prints for `attributes` (search with secrets), to look for plaintext.
    func rawSearchOutput(_ attributes: [String: String]) throws -> [UInt8] {
        var args = ["search", "--all"]
        for (k, v) in attributes.sorted(by: { $0.key < $1.key }) { args += [k, v] }
        let r = try runProgram("secret-tool", args, environment: environment)
        return Array(r.out.utf8) + Array(r.err.utf8)
    }
}

/// Waits for `condition` with a deadline, polling every 20 ms.
func waitUntil(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        usleep(20_000)
    }
    return try condition()
}
