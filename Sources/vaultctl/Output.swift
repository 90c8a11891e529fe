@preconcurrency import Glibc
import VaultModel

/// Writing to standard output and error without Foundation (so `vaultctl`
/// starts fast). Each call is one `write(2)`.
enum Output {
    static func out(_ s: String) { write(1, s) }
    static func err(_ s: String) { write(2, s) }

    private static func write(_ fd: Int32, _ s: String) {
        var bytes = Array(s.utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 { if errno == EINTR { continue } else { break } }
            done += n
        }
        for i in bytes.indices { bytes[i] = 0 }
    }

    /// Prints a JSON value on one line.
    static func json(_ value: JSON) { out(value.serializedString + "\n") }

    /// Prints rows as aligned columns.
    static func table(_ header: [String], _ rows: [[String]]) {
        var widths = header.map(\.count)
        for r in rows { for (i, c) in r.enumerated() { widths[i] = max(widths[i], c.count) } }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { i, c in i == cells.count - 1 ? c : c + String(repeating: " ", count: widths[i] - c.count) }
                .joined(separator: "  ")
        }
        var s = line(header) + "\n"
        for r in rows { s += line(r) + "\n" }
        out(s)
    }
}
