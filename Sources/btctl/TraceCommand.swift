// btctl trace show FILE: decode every frame of a btsnoop / pcap / pcapng file.
// btctl trace convert IN OUT: rewrite a trace in another format (for Wireshark).
// Both stream the file record by record: memory stays flat in the file's size.
// btctl trace replay FILE: TraceReplay.swift.

import ArgumentParser
import Foundation
import HCI
import Snoop

struct Trace: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Read and replay HCI traces (btsnoop, pcap, pcapng).", subcommands: [Show.self, Convert.self, Replay.self])

    /// Opens a trace for streaming, with a message that names the file.
    static func open(_ file: String) throws -> TraceStream {
        do { return try TraceStream(path: file) } catch { throw CLIError("\(file): \(error)") }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Decode every frame of a trace file.")

        @Argument(help: "A btsnoop (1001, 1002, 2001), pcap or pcapng (187, 201, 254) file.")
        var file: String

        @Flag(help: "One JSON object per frame on stdout (schema: docs/trace-json.md).")
        var json = false

        @Flag(help: "Show key material (LTK, IRK, CSRK, SMP confirm/random values); hidden by default.")
        var showKeys = false

        func run() async throws {
            var stream = try Trace.open(file)
            var decoder = FrameDecoder(showKeys: showKeys)
            var first: Int64?
            let out = OutputBuffer(capacity: 1 << 17)
            var number = 0
            let style: FrameDecoder.Style = json ? .json : .text  // read the flag once, not per frame
            while let r = try stream.next() {
                number += 1
                if first == nil { first = r.timestampMicros }
                decoder.write(r, number: number, firstTimestamp: first ?? r.timestampMicros, style: style, into: out)
                if out.count > 1 << 16 {
                    try out.withBytes(StandardOutput.write)
                    out.removeAll()
                }
                if Interrupt.requested { break }
            }
            try out.withBytes(StandardOutput.write)
            if let damage = stream.damage {
                throw CLIError("\(file): \(number) frames decoded, then the file is \(damage)")
            }
        }
    }

    struct Convert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Rewrite a trace as btsnoop, pcap or pcapng.",
            discussion: """
            The output format comes from OUT's extension (.pcap, .pcapng, anything else btsnoop) \
            or --to; `-` writes to standard output (then --to is required), e.g. \
            `btctl trace convert capture.btsnoop - --to pcap | wireshark -k -i -`. H4 traces stay \
            H4 (pcap and pcapng with the direction pseudo-header, link type 201); Linux monitor \
            traces (btsnoop 2001, link type 254) stay monitor traces unless --link h4, which \
            leaves out the records that carry no HCI packet (counted on stderr).
            """)

        enum Format: String, ExpressibleByArgument, CaseIterable { case btsnoop, pcap, pcapng }
        enum Link: String, ExpressibleByArgument, CaseIterable { case h4, monitor }

        @Argument(help: "The trace to read (btsnoop, pcap or pcapng).") var input: String
        @Argument(help: "The file to write, or - for standard output.") var output: String
        @Option(help: "Output format (default: by OUT's extension).") var to: Format?
        @Option(help: "Output link type (default: the input's: monitor stays monitor, anything else h4).") var link: Link?

        func validate() throws {
            if output == "-", to == nil { throw ValidationError("--to is required when OUT is - (standard output)") }
            if output != "-", URL(fileURLWithPath: output).standardizedFileURL.path == URL(fileURLWithPath: input).standardizedFileURL.path {
                throw ValidationError("OUT must differ from IN (the input is read while the output is written)")
            }
        }

        func run() async throws {
            var stream = try Trace.open(input)
            let monitorIn: Bool
            switch stream.format {
            case let .btsnoop(d): monitorIn = d == TraceFormat.btsnoopMonitor
            case let .pcap(l, _, _): monitorIn = l == TraceFormat.linkTypeMonitor
            case .pcapng: monitorIn = false  // decided per interface; H4 unless asked
            }
            let monitor = (link ?? (monitorIn ? .monitor : .h4)) == .monitor
            let format = to ?? {
                switch TraceEncoder.Output(forPath: output) {
                case .pcap: return .pcap
                case .pcapng: return .pcapng
                case .btsnoop: return .btsnoop
                }
            }()
            let encoding: TraceEncoder.Output
            switch format {
            case .btsnoop: encoding = .btsnoop(datalink: monitor ? TraceFormat.btsnoopMonitor : TraceFormat.btsnoopH4)
            case .pcap: encoding = .pcap(linkType: monitor ? TraceFormat.linkTypeMonitor : TraceFormat.linkTypeH4WithPHDR)
            case .pcapng: encoding = .pcapng(linkType: monitor ? TraceFormat.linkTypeMonitor : TraceFormat.linkTypeH4WithPHDR)
            }
            let writer: TraceFileWriter
            do { writer = try TraceFileWriter(path: output, output: encoding) } catch { throw CLIError("cannot write \(output): \(error)") }
            defer { writer.close() }
            var live = LiveStatus(json: false)
            var n = 0
            while let r = try stream.next() {
                writer.write(r)
                n += 1
                if n & 0xFFF == 0 { live.update("\(n) records") }
                if Interrupt.requested { break }
            }
            live.clear()
            if let e = writer.error { throw CLIError("cannot write \(output): \(e)") }
            let (written, left) = writer.counts
            var note = "\(written) records written to \(output == "-" ? "standard output" : output) (\(encoding))"
            if left > 0 { note += "; \(left) records left out: they carry no HCI packet (use --link monitor to keep them)" }
            btctl.note(note)
            if let damage = stream.damage {
                throw CLIError("\(input): \(written + left) records converted, then the file is \(damage)")
            }
        }
    }
}
