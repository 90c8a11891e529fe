@preconcurrency import Glibc
import VaultModel

/// Reads a passphrase from a terminal prompt (echo off, on `/dev/tty`), from
/// a file descriptor, or from a file — never from argv.
enum PassphraseSource {
    /// Where the passphrase comes from, per `--passphrase-fd` / `--passphrase-file`.
    static func read(_ args: Arguments, prompt: String, fdOption: String = "--passphrase-fd", fileOption: String = "--passphrase-file") throws(VaultError) -> String {
        if let fdText = args.value(fdOption) {
            guard let fd = Int32(fdText), fd >= 0 else { throw VaultError(.usage, "\(fdOption) needs a file descriptor number") }
            return try firstLine(readAll(fd: fd, what: "\(fdOption) \(fd)"))
        }
        if let path = args.value(fileOption) {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw VaultError(.failure, "cannot open passphrase file \(path): \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            return try firstLine(readAll(fd: fd, what: path))
        }
        return try prompted(prompt)
    }

    private static func readAll(fd: Int32, what: String) throws(VaultError) -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; throw VaultError(.failure, "cannot read the passphrase from \(what)") }
            if n == 0 { break }
            out += buf[0..<n]
            if out.count > 4096 { throw VaultError(.badInput, "the passphrase from \(what) is longer than 4096 bytes") }
        }
        for i in buf.indices { buf[i] = 0 }
        return out
    }

    private static func firstLine(_ bytes: [UInt8]) throws(VaultError) -> String {
        var b = bytes
        if let nl = b.firstIndex(of: 0x0A) { b = Array(b[..<nl]) }
        if b.last == 0x0D { b.removeLast() }
        guard !b.isEmpty else { throw VaultError(.badInput, "the passphrase is empty") }
        guard let s = String(validating: b, as: UTF8.self) else { throw VaultError(.badInput, "the passphrase is not valid UTF-8") }
        return s
    }

    /// Prompts on the controlling terminal with echo off.
    private static func prompted(_ prompt: String) throws(VaultError) -> String {
        let tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        guard tty >= 0 else {
            throw VaultError(.usage, "no terminal to ask for the passphrase; use --passphrase-fd N or --passphrase-file PATH")
        }
        defer { close(tty) }
        var old = termios()
        let isTTY = tcgetattr(tty, &old) == 0
        if isTTY {
            var quiet = old
            quiet.c_lflag &= ~tcflag_t(ECHO)
            quiet.c_lflag |= tcflag_t(ECHONL)
            tcsetattr(tty, TCSAFLUSH, &quiet)
        }
        defer { if isTTY { tcsetattr(tty, TCSAFLUSH, &old) } }
        var p = Array(prompt.utf8)
        _ = p.withUnsafeMutableBytes { write(tty, $0.baseAddress, $0.count) }
        var line: [UInt8] = []
        var c: UInt8 = 0
        while Glibc.read(tty, &c, 1) == 1 {
            if c == 0x0A { break }
            line.append(c)
            if line.count > 4096 { throw VaultError(.badInput, "the passphrase is longer than 4096 bytes") }
        }
        return try firstLine(line)
    }
}
