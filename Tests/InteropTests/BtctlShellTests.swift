// `btctl shell`, a central's session typed line by line: against Bumble's GATT server
// on Rootcanal (one link through scan, connect, reads, a write Bumble hears, a long
// read, a notification and an indication, an unsubscription Bumble hears, and refused
// commands that leave the session going), on the virtual radio (discovery, a floor
// plan notified in pieces, pairing, links and which is current), a passkey typed on the
// console for Bumble's Security Manager, a link Bumble's side ends, notifications that
// outrun a console nobody reads, a bond file that is not one, and values no command
// takes, each refused while the session goes on. Every line is checked
// against docs/schemas/shell.schema.json.

import BLETesting
import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlShellTests {
    /// The JSON events printed so far.
    static func events(_ p: LiveProcess) -> [[String: Any]] { BtctlServeTests.events(p.output) }

    /// Waits for the `n`th event (1-based) named `event`, optionally matching `where`.
    static func waitFor(_ p: LiveProcess, _ event: String, count n: Int = 1, within limit: Duration = .seconds(30),
                        where match: @escaping @Sendable ([String: Any]) -> Bool = { _ in true }) async -> Bool {
        await p.waitForOutput(within: limit) { out in
            BtctlServeTests.events(out).filter { $0["event"] as? String == event && match($0) }.count >= n
        }
    }

    /// Rootcanal, Bumble's GATT server on it (advertising), and `btctl shell --json` on
    /// another of its controllers, with a bond file of its own.
    struct BumbleRig {
        let rc: RootcanalProcess
        let bumble: LiveProcess
        let shell: LiveProcess
        let bonds: String

        static func start(_ arguments: [String] = []) async throws -> BumbleRig? {
            guard let (rc, bumble) = try await BtctlGATTTests.bumbleServer(arguments) else { return nil }
            let bonds = BtctlShellTests.bondFile()
            return BumbleRig(rc: rc, bumble: bumble, shell: try LiveProcess(BtctlGATTTests.btctl, ["shell", "-t", rc.transportSpec, "--json", "--bonds", bonds]),
                             bonds: bonds)
        }

        func end() {
            rc.stop()
            try? FileManager.default.removeItem(atPath: bonds)
        }
    }

    /// Sends `quit`, expects the exit `status`, and returns the lines printed, each checked
    /// against the schema.
    static func quit(_ shell: LiveProcess, status: Int32, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [[String: Any]] {
        shell.send("quit")
        #expect(await shell.exit(timeout: 20) == status, "\(shell.output)", sourceLocation: sourceLocation)
        return try JSONSchemaTests.check(shell.output, against: "shell", sourceLocation: sourceLocation)
    }

    /// `btctl shell --json` on the virtual radio with the bond file `bonds`, ready and
    /// connected to the fire-alarm sender.
    static func connectedOnTheVirtualRadio(bonds: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> LiveProcess {
        let shell = try LiveProcess(BtctlGATTTests.btctl, ["shell", "-t", "virtual", "--json", "--bonds", bonds])
        #expect(await Self.waitFor(shell, "ready"), "\(shell.output)", sourceLocation: sourceLocation)
        shell.send("connect FireAlarm-B3")
        #expect(await Self.waitFor(shell, "connected"), "\(shell.output)", sourceLocation: sourceLocation)
        return shell
    }

    /// A bond file's path of the test's own (the test removes it).
    static func bondFile() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("shell-bonds-\(UUID().uuidString).json").path
    }

    @Test func aSessionAgainstBumblesServerKeepsOneLink() async throws {
        guard let rig = try await BumbleRig.start() else { return }
        defer { rig.end() }
        let (bumble, shell) = (rig.bumble, rig.shell)
        #expect(await Self.waitFor(shell, "ready"), "\(shell.output)")
        shell.send("scan 1")
        #expect(await Self.waitFor(shell, "device") { $0["address"] as? String == "F1:F2:F3:F4:F5:F6/random" }, "\(shell.output)")
        shell.send("connect F1:F2:F3:F4:F5:F6/random")
        #expect(await Self.waitFor(shell, "connected"), "\(shell.output)")
        for line in ["read FFF1", "write FFF1 \"shell\"", "read FFF1", "read FFF4", "frobnicate", "read FFF9", "subscribe FFF2", "subscribe FFF3 indicate"] {
            shell.send(line)
        }
        #expect(await Self.waitFor(shell, "indication"), "\(shell.output)")
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"indication-confirmed\"") }, "\(bumble.output)")
        shell.send("unsubscribe FFF2")
        #expect(await Self.waitFor(shell, "unsubscribed"), "\(shell.output)")
        shell.send("phy 2m")
        shell.send("info")
        #expect(await Self.waitFor(shell, "info"), "\(shell.output)")
        // The end of input writes FFF3's subscription off and disconnects: Bumble's
        // script ends with its link.
        shell.closeInput()
        #expect(await shell.exit(timeout: 20) == 1, "a command failed: exit status 1")
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"done\"") }, "\(bumble.output)")
        _ = await bumble.stop()

        let lines = try JSONSchemaTests.check(shell.output, against: "shell")
        let names = lines.compactMap { $0["event"] as? String }
        #expect(names.filter { $0 == "connected" }.count == 1 && names.last == "disconnected", "\(names)")
        let values = lines.filter { $0["event"] as? String == "value" }
        #expect(values.compactMap { $0["text"] as? String }.prefix(2) == ["bumble", "shell"], "\(values)")
        #expect((values.last?["value"] as? String) == (0..<200).map { String(format: "%02x", $0) }.joined(), "the long read: all 200 bytes")
        #expect(lines.contains { $0["event"] as? String == "written" && $0["length"] as? Int == 5 })
        #expect(lines.contains { $0["event"] as? String == "notification" && $0["value"] as? String == "42" && $0["uuid"] as? String == "FFF2" })
        #expect(lines.contains { $0["event"] as? String == "indication" && $0["value"] as? String == "4343" })
        let errors = lines.filter { $0["event"] as? String == "error" }.compactMap { $0["command"] as? String }
        #expect(errors == ["frobnicate", "read FFF9"], "\(errors)")
        let info = try #require(lines.first { $0["event"] as? String == "info" })
        #expect(info["mtu"] as? Int == 517 && info["encrypted"] as? Bool == false && info["phy_tx"] as? String == "LE 2M", "\(info)")
        #expect(lines.contains { $0["event"] as? String == "phy" && $0["tx"] as? String == "LE 2M" && $0["rx"] as? String == "LE 2M" }, "\(lines)")
        // Bumble heard the write and the subscriptions coming and going.
        #expect(bumble.output.contains("\"value\": \"7368656c6c\""), "\(bumble.output)")
        #expect(bumble.output.contains("\"uuid\": \"FFF2\", \"notify\": false, \"indicate\": false"), "\(bumble.output)")
        // FFF3, still subscribed at the end of input, was written off before the link went.
        #expect(bumble.output.contains("\"uuid\": \"FFF3\", \"notify\": false, \"indicate\": false"), "\(bumble.output)")
    }

    /// On the virtual radio (`-t virtual`: the fire-alarm sender): discovery, the floor
    /// plan notified in pieces, pairing (Just Works, bonding), the link's info after, and
    /// links and select with one link, a pause; `quit` ends the session with the link
    /// disconnected, and a session with a refused command exits 1.
    @Test func aSessionOnTheVirtualRadio() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let bonds = Self.bondFile()
        defer { try? FileManager.default.removeItem(atPath: bonds) }
        let shell = try LiveProcess(BtctlGATTTests.btctl, ["shell", "-t", "virtual", "--json", "--bonds", bonds])
        #expect(await Self.waitFor(shell, "ready"), "\(shell.output)")
        for line in ["# a comment, then a blank line", "", "connect FireAlarm-B3", "data-length 100", "parameters 24:24:0:400", "rssi",
                     "discover", "subscribe F1DE0003-2C4B-4D5E-8F60-7A8B9CADBEEF"] {
            shell.send(line)
        }
        // The floor plan's notifications: three pieces at ATT_MTU 517.
        #expect(await Self.waitFor(shell, "notification", count: 3), "\(shell.output)")
        shell.send("pair")
        #expect(await Self.waitFor(shell, "paired") { $0["method"] as? String == "Just Works" && $0["bonded"] as? Bool == true }, "\(shell.output)")
        for line in ["info", "links", "select C0:FF:EE:00:00:01", "sleep 0.2", "sleep 0", "quit", "read 2A00"] { shell.send(line) }
        #expect(await shell.exit(timeout: 20) == 1, "\(shell.output)")
        let lines = try JSONSchemaTests.check(shell.output, against: "shell")
        let names = lines.compactMap { $0["event"] as? String }
        #expect(names.filter { $0 == "error" }.count == 1 && !names.contains("value"), "'sleep 0' refused; quit ends the session before the read: \(names)")
        #expect(lines.contains { $0["event"] as? String == "characteristic" && $0["uuid"] as? String == "F1DE0001-2C4B-4D5E-8F60-7A8B9CADBEEF" })
        let plan = lines.filter { $0["event"] as? String == "notification" }.compactMap { $0["value"] as? String }.joined()
        #expect(plan.hasPrefix("3c737667") && plan.hasSuffix("3c2f7376673e"), "the SVG floor plan, <svg ... </svg>")
        let info = try #require(lines.first { $0["event"] as? String == "info" })
        #expect(info["encrypted"] as? Bool == true && info["bonded"] as? Bool == true, "\(info)")
        #expect(lines.contains { $0["event"] as? String == "link" && $0["current"] as? Bool == true && $0["peer"] as? String == "C0:FF:EE:00:00:01" })
        #expect(names.suffix(3) == ["selected", "error", "disconnected"], "\(names)")
        #expect(lines.contains { $0["event"] as? String == "data_length" && $0["tx_octets"] as? Int == 100 }, "\(lines)")
        #expect(lines.contains { $0["event"] as? String == "parameters" && $0["interval"] as? Int == 24 && $0["updated"] as? Bool == true }, "\(lines)")
        #expect(lines.contains { $0["event"] as? String == "rssi" && $0["rssi"] as? Int == -52 }, "the fire alarm at 3.5 m: \(lines)")
        // The bond went to the file named.
        #expect(FileManager.default.contents(atPath: bonds).map { String(decoding: $0, as: UTF8.self).contains("C0:FF:EE:00:00:01") } == true)
    }

    /// Lines from outside the process, as a script may carry them: values no command
    /// takes (a sign, fullwidth digits, handles 0 and 0x10000, hex split inside a byte,
    /// an unclosed quote, NaN, infinities, hyphens where a UUID has none, a 5,000-byte
    /// word). Each is refused with one error naming it, and the session goes on: the
    /// reads between and after them answer, and the exit status says a command failed.
    @Test func valuesNoCommandTakesAreRefusedAndTheSessionGoesOn() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let bonds = Self.bondFile()
        defer { try? FileManager.default.removeItem(atPath: bonds) }
        let shell = try await Self.connectedOnTheVirtualRadio(bonds: bonds)
        let refused = ["read 0x+3", "read ０x3", "read 0x0000", "read 0x10000", "write 0x0003 1:2", "write 0x0003 \"", "write 0x0003",
                       "sleep nan", "sleep 1e400", "scan -inf", "data-length 1e9", "select nobody", "connect", "frobnicate",
                       "subscribe 1-8-0-F", String(repeating: "a", count: 5000)]
        for line in refused.prefix(8) { shell.send(line) }
        shell.send("read 2A00")
        for line in refused.dropFirst(8) { shell.send(line) }
        shell.send("read 2A00")
        #expect(await Self.waitFor(shell, "value", count: 2), "\(shell.output)")
        let lines = try await Self.quit(shell, status: 1)
        let names = lines.compactMap { $0["event"] as? String }
        #expect(names.filter { $0 == "error" }.count == refused.count, "\(names)")
        #expect(lines.filter { $0["event"] as? String == "value" }.allSatisfy { $0["text"] as? String == "FireAlarm-B3" }, "\(lines)")
        #expect(names.last == "disconnected", "\(names)")
    }

    /// Pairing's question answered on the console: Bumble displays 123456 (MITM, Secure
    /// Connections); `pair` asks for it as an `enter_passkey` event, the next line typed
    /// answers it, and the link is authenticated.
    @Test func aPasskeyIsTypedOnTheConsole() async throws {
        guard let rig = try await BtctlPairTests.rig("shell") else { return }
        defer { rig.end() }
        let peer = try rig.bumble(["peripheral", "1", "1", "display", "123456"])
        defer { RootcanalProcess.kill(peer.process) }
        let shell = try LiveProcess(BtctlGATTTests.btctl, ["shell", "-t", rig.rc.transportSpec, "--json", "--bonds", rig.file,
                                                           "--io-capability", "keyboard-only", "--mitm"])
        #expect(await Self.waitFor(shell, "ready"), "\(shell.output)")
        shell.send("connect F1:F2:F3:F4:F5:F6/random")
        shell.send("pair")
        #expect(await Self.waitFor(shell, "enter_passkey", within: .seconds(45)), "\(shell.output)")
        shell.send("123456")
        #expect(await Self.waitFor(shell, "paired", within: .seconds(45)), "\(shell.output)")
        shell.send("info")
        #expect(await Self.waitFor(shell, "info"), "\(shell.output)")
        let lines = try await Self.quit(shell, status: 0)
        #expect(lines.compactMap { $0["event"] as? String } == ["ready", "connected", "enter_passkey", "paired", "info", "disconnected"], "\(lines)")
        let paired = try #require(lines.first { $0["event"] as? String == "paired" })
        #expect(paired["method"] as? String == "Passkey Entry" && paired["level"] as? String == "secure-connections", "\(paired)")
        #expect(lines.first { $0["event"] as? String == "info" }?["level"] as? String == "secure-connections")
    }

    /// A pairing the peer starts (Bumble's Security Request, with no command of the
    /// shell's waiting) is reported when it ends, between commands. Just Works is not
    /// asked: we send the Pairing Request, as BlueZ's kernel asks only as responder.
    @Test func aPairingThePeerAsksForIsReportedBetweenCommands() async throws {
        guard let rig = try await BtctlPairTests.rig("shell-request") else { return }
        defer { rig.end() }
        let peer = try rig.bumble(["peripheral-request", "1", "0", "none", "0"])
        defer { RootcanalProcess.kill(peer.process) }
        let shell = try LiveProcess(BtctlGATTTests.btctl, ["shell", "-t", rig.rc.transportSpec, "--json", "--bonds", rig.file])
        #expect(await Self.waitFor(shell, "ready"), "\(shell.output)")
        shell.send("connect F1:F2:F3:F4:F5:F6/random")
        #expect(await Self.waitFor(shell, "paired", within: .seconds(45)), "\(shell.output)")
        shell.send("info")
        #expect(await Self.waitFor(shell, "info"), "\(shell.output)")
        let lines = try await Self.quit(shell, status: 0)
        #expect(lines.compactMap { $0["event"] as? String } == ["ready", "connected", "paired", "info", "disconnected"], "\(lines)")
        let paired = try #require(lines.first { $0["event"] as? String == "paired" })
        #expect(paired["method"] as? String == "Just Works" && paired["bonded"] as? Bool == true && paired["handle"] is Int, "\(paired)")
        #expect(lines.first { $0["event"] as? String == "info" }?["bonded"] as? Bool == true)
    }

    /// A link the peer's side ends (Bumble's process goes: Rootcanal says Power Off) is
    /// reported as it happens, with no command waiting; the session goes on without it.
    /// SIGINT ends the session as the other btctl commands end: the host's shutdown
    /// disconnects every link, and each is reported before btctl exits with 130.
    @Test func anInterruptEndsTheLinksAndSaysSo() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let bonds = Self.bondFile()
        defer { try? FileManager.default.removeItem(atPath: bonds) }
        let shell = try await Self.connectedOnTheVirtualRadio(bonds: bonds)
        // The console stays open: the signal alone ends the session.
        kill(shell.process.processIdentifier, SIGINT)
        #expect(await shell.exit(timeout: 20) == 130, "\(shell.output)")
        let lines = try JSONSchemaTests.check(shell.output, against: "shell")
        #expect(lines.compactMap { $0["event"] as? String } == ["ready", "connected", "disconnected"], "\(lines)")
        let ended = try #require(lines.last)
        #expect((ended["reason"] as? String)?.contains("0x16") == true && ended["peer"] as? String == "C0:FF:EE:00:00:01", "\(ended)")
    }

    /// A bond file that is not one (a truncated write, a hand edit): the shell still
    /// pairs, and its `paired` line says the link is not bonded and why
    /// (`bond_not_stored`, naming the file); `btctl bonds` on the same file exits 1 with
    /// what is wrong and how to go on, not the decoder's dump.
    @Test func aBondFileThatIsNotOneIsReported() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let bonds = Self.bondFile()
        defer { try? FileManager.default.removeItem(atPath: bonds) }
        try Data("{".utf8).write(to: URL(fileURLWithPath: bonds))
        let shell = try LiveProcess(BtctlGATTTests.btctl, ["shell", "-t", "virtual", "--json", "--bonds", bonds])
        #expect(await Self.waitFor(shell, "ready"), "\(shell.output)")
        shell.send("connect FireAlarm-B3")
        shell.send("pair")
        #expect(await Self.waitFor(shell, "paired"), "\(shell.output)")
        let lines = try await Self.quit(shell, status: 0)
        let paired = try #require(lines.first { $0["event"] as? String == "paired" })
        #expect(paired["bonded"] as? Bool == false && paired["level"] as? String == "encrypted", "\(paired)")
        #expect(paired["bond_not_stored"] as? String == "\(bonds) is not a bond file this version reads: not valid JSON; move it aside to start with no bonds",
                "\(paired)")
        let listed = try await BtctlPairTests.run(["bonds", "-t", "virtual", "--bonds", bonds])
        #expect(listed.status == 1 && listed.out.isEmpty, "\(listed)")
        #expect(listed.err.contains("\(bonds) is not a bond file this version reads: not valid JSON") && !listed.err.contains("DecodingError"), "\(listed.err)")
    }

    @Test func aLinkThePeerEndsIsReportedAsItEnds() async throws {
        guard let rig = try await BumbleRig.start() else { return }
        defer { rig.end() }
        let (bumble, shell) = (rig.bumble, rig.shell)
        shell.send("connect F1:F2:F3:F4:F5:F6/random")
        shell.send("subscribe FFF2")
        #expect(await Self.waitFor(shell, "notification"), "\(shell.output)")
        _ = await bumble.stop()
        #expect(await Self.waitFor(shell, "disconnected"), "\(shell.output)")
        shell.send("links")
        shell.send("read FFF1")
        #expect(await Self.waitFor(shell, "error"), "\(shell.output)")
        let lines = try await Self.quit(shell, status: 1)
        #expect(lines.compactMap { $0["event"] as? String } == ["ready", "connected", "subscribed", "notification", "disconnected", "error"], "\(lines)")
        let ended = try #require(lines.first { $0["event"] as? String == "disconnected" })
        #expect((ended["reason"] as? String)?.contains("0x15") == true && ended["peer"] as? String == "F1:F2:F3:F4:F5:F6/random", "\(ended)")
        #expect((lines.last?["message"] as? String)?.contains("no link") == true, "\(lines.last ?? [:])")
    }

    /// A subscription whose values come faster than the console takes them keeps its
    /// newest 256 and says how many it dropped before the next value shown: nothing is
    /// lost without a word. Bumble notifies FFF5 1,000 times (200 bytes each, ~450 bytes
    /// a line) while nobody reads the shell's output, so its writes block once the pipe
    /// is full; every notification is then either shown or counted.
    @Test func notificationsThatOutrunTheConsoleAreCountedAsDropped() async throws {
        let burst = 1000
        guard let rig = try await BumbleRig.start(["--burst", String(burst)]) else { return }
        defer { rig.end() }
        let (bumble, shell) = (rig.bumble, rig.shell)
        shell.send("connect F1:F2:F3:F4:F5:F6/random")
        #expect(await Self.waitFor(shell, "connected"), "\(shell.output)")
        shell.pauseReading()
        shell.send("subscribe FFF5")
        #expect(await bumble.waitForOutput(within: .seconds(60)) { $0.contains("\"event\": \"burst-sent\"") }, "\(bumble.output)")
        shell.resumeReading()
        @Sendable func accounted(_ out: String) -> (shown: Int, dropped: Int) {
            let lines = BtctlServeTests.events(out)
            return (lines.filter { $0["event"] as? String == "notification" }.count,
                    lines.compactMap { $0["event"] as? String == "dropped" ? $0["count"] as? Int : nil }.max() ?? 0)
        }
        #expect(await shell.waitForOutput(within: .seconds(30)) { let a = accounted($0); return a.shown + a.dropped >= burst },
                "\(accounted(shell.output))")
        let lines = try await Self.quit(shell, status: 0)
        let (shown, dropped) = accounted(shell.output)
        #expect(shown + dropped == burst && dropped > 0, "shown \(shown), dropped \(dropped)")
        // The counts only grow, each said before a value, and the last value shown is the last sent.
        let counts = lines.compactMap { $0["event"] as? String == "dropped" ? $0["count"] as? Int : nil }
        #expect(counts == counts.sorted() && Set(counts).count == counts.count, "\(counts)")
        let values = lines.filter { $0["event"] as? String == "notification" }.compactMap { $0["value"] as? String }
        #expect(values.last == String(repeating: String(format: "%02x", (burst - 1) & 0xFF), count: 200), "\(values.last ?? "")")
    }
}
