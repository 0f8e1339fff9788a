// btctl trace show FILE: decode every frame of a btsnoop / pcap / pcapng file.

import ArgumentParser
import Foundation
import HCI
import Snoop

struct Trace: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read HCI traces (btsnoop, pcap, pcapng).", subcommands: [Show.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Decode every frame of a trace file.")

        @Argument(help: "A btsnoop (1001, 1002, 2001), pcap or pcapng (187, 201, 254) file.")
        var file: String

        @Flag(help: "One JSON object per frame on stdout (schema: docs/trace-json.md).")
        var json = false

        @Flag(help: "Show key material (LTK, IRK, CSRK, SMP confirm/random values); hidden by default.")
        var showKeys = false

        func run() async throws {
            guard let data = FileManager.default.contents(atPath: file) else {
                throw CLIError("cannot read \(file): \(FileManager.default.fileExists(atPath: file) ? "permission denied" : "no such file")")
            }
            let trace: Snoop.Trace
            do { trace = try TraceReader.read([UInt8](data)) } catch { throw CLIError("\(file): \(error)") }
            let decoder = FrameDecoder(showKeys: showKeys)
            let first = trace.records.first?.timestampMicros ?? 0
            var out = ""
            out.reserveCapacity(1 << 16)
            for (i, r) in trace.records.enumerated() {
                let f = decoder.decode(r, number: i + 1, firstTimestamp: first)
                if json {
                    f.json.render(into: &out)
                    out += "\n"
                } else {
                    out += f.summary + "\n"
                    for d in f.details { out += "                          " + d + "\n" }
                }
                if out.utf8.count > 1 << 16 {
                    FileHandle.standardOutput.write(Data(out.utf8))
                    out.removeAll(keepingCapacity: true)
                }
            }
            FileHandle.standardOutput.write(Data(out.utf8))
            if let damage = trace.damage {
                throw CLIError("\(file): \(trace.records.count) frames decoded, then the file is \(damage)")
            }
        }
    }
}
