// docs/btctl.md shows what btctl prints; the examples on the in-process virtual radio
// (`-t virtual`, `-t virtual5`) are run here and must print what the page shows, so
// the page cannot drift from the program (several examples had: handles printed
// 0x3 where btctl printed 0x0003, services without the names btctl gives them, LE
// features from before the radio had LE Coded). The JSON lines of every `--json`
// example, on any transport, must follow the command's schema.

import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlDocsTests {
    /// One `$ btctl …` line of a fenced block and the lines after it up to the next
    /// `$ ` or the block's end. In a `btctl shell` example, lines starting `> ` are the
    /// input typed at the prompt.
    struct Example {
        var line: Int
        var command: String
        var output: [String]
    }

    static func examples(_ markdown: String) -> [Example] {
        var found: [Example] = [], current: Example?, inBlock = false
        for (i, l) in markdown.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            if l.hasPrefix("```") {
                if let c = current { found.append(c) }
                current = nil
                inBlock.toggle()
                continue
            }
            guard inBlock else { continue }
            if l.hasPrefix("$ ") {
                if let c = current { found.append(c) }
                current = Example(line: i + 1, command: String(l.dropFirst(2)), output: [])
            } else {
                current?.output.append(String(l))
            }
        }
        return found
    }

    /// Examples whose output depends on timing, with the reason; every other example
    /// on the virtual radio is checked.
    static let unchecked: [String: String] = [
        "btctl demo": "the two sides' lines interleave differently from run to run, and the times vary",
        "btctl sync -t virtual5 C0:FF:EE:00:00:01 --duration 0.2": "how many 100 ms packets fit in 0.2 s",
        "btctl sync -t virtual5 C0:FF:EE:00:00:09/2 C0:FF:EE:00:00:01/1 --duration 0.1": "how many 100 ms packets fit in 0.1 s",
    ]

    /// Whether `shown` is stdout and stderr interleaved, each in its own order (a
    /// page shows both streams as a terminal does; their relative order is the
    /// scheduler's).
    static func interleaves(_ shown: [String], _ out: [String], _ err: [String]) -> Bool {
        var o = out[...], e = err[...]
        for l in shown {
            if o.first == l { o = o.dropFirst() } else if e.first == l { e = e.dropFirst() } else { return false }
        }
        return o.isEmpty && e.isEmpty
    }

    /// The lines of `s`, with the seconds a trace line starts with (`0.000305`: when a
    /// packet came, which no two runs share) as `S.SSSSSS`.
    static func lines(_ s: String) -> [String] {
        guard !s.isEmpty else { return [] }
        return s.split(separator: "\n", omittingEmptySubsequences: false).dropLast(s.hasSuffix("\n") ? 1 : 0)
            .map { String($0).replacing(/\b\d+\.\d{6}\b/, with: "S.SSSSSS") }
    }

    static func quoted(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }

    @Test func virtualRadioExamplesPrintWhatThePageShows() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let page = try String(contentsOfFile: Interop.root + "/docs/btctl.md", encoding: .utf8)
        let all = Self.examples(page).filter { $0.command.hasPrefix("btctl ") && ($0.command.contains("-t virtual") || $0.command == "btctl demo") }
        #expect(all.count >= 15, "the page's examples on the virtual radio: \(all.map(\.command))")
        let checked = all.filter { Self.unchecked[$0.command] == nil }
        let bin = URL(fileURLWithPath: BtctlGATTTests.btctl).deletingLastPathComponent().path
        let errors = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-docs-\(getpid()).err").path
        defer { try? FileManager.default.removeItem(atPath: errors) }
        for ex in checked {
            var script = "export PATH=\(Self.quoted(bin)):$PATH; "
            var shown = ex.output
            if ex.command.hasPrefix("btctl shell") {
                let typed = shown.filter { $0.hasPrefix("> ") }.map { String($0.dropFirst(2)) }
                shown.removeAll { $0.hasPrefix("> ") }
                script += "printf '%s\\n' \(typed.map(Self.quoted).joined(separator: " ")) | { \(ex.command); } 2>\(Self.quoted(errors))"
            } else {
                script += "{ \(ex.command); } 2>\(Self.quoted(errors))"
            }
            // The status is the page's business only where it shows it (`; echo $?`).
            let run = try await Interop.execute("/bin/bash", ["-c", script], timeout: 60)
            let err = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            #expect(Self.interleaves(Self.lines(shown.joined(separator: "\n")), Self.lines(run.out), Self.lines(err)),
                    "docs/btctl.md:\(ex.line): \(ex.command)\n--- the page:\n\(shown.joined(separator: "\n"))\n--- stdout:\n\(run.out)--- stderr:\n\(err)")
        }
    }

    /// The schema a command's `--json` lines follow (docs/schemas): `gatt serve` is
    /// gatt-serve, `trace show` trace-show, `l2cap connect` l2cap, `scan` scan.
    static func schema(of command: String) -> String? {
        let words = command.split(separator: " ").map(String.init)
        guard words.count >= 2, words[0] == "btctl" else { return nil }
        let sub = words[1]
        if ["gatt", "trace"].contains(sub), words.count >= 3 { return "\(sub)-\(words[2])" }
        return sub
    }

    /// Every `--json` example in the docs (on any transport, Rootcanal's too): each line
    /// it shows that is JSON must follow the command's schema, as every line btctl
    /// prints does (`JSONSchemaTests`), so an example cannot show a field or an event
    /// the program no longer has.
    @Test func jsonExamplesFollowTheirCommandsSchemas() throws {
        let docs = Interop.root + "/docs/"
        var checked = 0
        for file in try FileManager.default.contentsOfDirectory(atPath: docs).filter({ $0.hasSuffix(".md") }).sorted() {
            let page = try String(contentsOfFile: docs + file, encoding: .utf8)
            for ex in Self.examples(page) where ex.command.hasPrefix("btctl ") && ex.command.contains("--json") {
                let schema = try #require(Self.schema(of: ex.command), "\(file):\(ex.line)")
                let json = ex.output.filter { $0.hasPrefix("{") }
                #expect(!json.isEmpty, "\(file):\(ex.line): a --json example shows no JSON line")
                _ = try JSONSchemaTests.check(json.joined(separator: "\n"), against: schema)
                checked += 1
            }
        }
        #expect(checked >= 6, "the docs' --json examples: \(checked)")
    }

    /// The comparison itself: it takes the two streams in any interleaving, and
    /// refuses a line neither printed, a line out of its stream's order, and a line
    /// printed but not shown.
    @Test func theComparisonRefusesWhatTheProgramDidNotPrint() {
        #expect(Self.interleaves(["a", "x", "b"], ["a", "b"], ["x"]))
        #expect(!Self.interleaves(["a", "b"], ["a", "b"], ["x"]))
        #expect(!Self.interleaves(["b", "a"], ["a", "b"], []))
        #expect(!Self.interleaves(["a", "0x3"], ["a", "0x0003"], []))
        #expect(Self.lines("a\n\nb\n") == ["a", "", "b"] && Self.lines("") == [])
        #expect(Self.lines("#2      0.000305  rx") == ["#2      S.SSSSSS  rx"])
    }
}
