// `btctl radio`: the virtual radio's controllers served on TCP ports, as Rootcanal
// serves its own. Bumble's host (an independent stack) drives one controller as a GATT
// peripheral, our btctl drives the other as a central and reads Bumble's value: the
// virtual controller's advertising, connection and data path, tried by a host we did
// not write. A host that leaves takes its controller off the radio; the port takes
// the next host.

import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlRadioTests {
    /// The ports `radio --json` printed, by controller index.
    static func ports(_ output: String) -> [Int: String] {
        var out: [Int: String] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("{") {
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], o["event"] as? String == "controller",
                  let i = o["index"] as? Int, let t = o["transport"] as? String else { continue }
            out[i] = t
        }
        return out
    }

    /// A `btctl radio --json` with two controllers (`extra` arguments added), once it
    /// has printed both: the process, each controller's transport (`tcp:HOST:PORT`) and
    /// its port alone (what Bumble's scripts take).
    static func radio(_ extra: [String] = []) async throws -> (process: LiveProcess, transports: [String], ports: [String]) {
        let radio = try LiveProcess(BtctlGATTTests.btctl, ["radio", "--controllers", "2", "--json"] + extra)
        #expect(await radio.waitForOutput { ports($0).count == 2 }, "\(radio.output)")
        let found = ports(radio.output)
        let transports = [try #require(found[1]), try #require(found[2])]
        return (radio, transports, try transports.map { try #require($0.split(separator: ":").last.map(String.init)) })
    }

    /// With `--bluetooth5` Bumble advertises with the extended commands (and btctl
    /// connects with LE Extended Create Connection); without, with the legacy ones.
    @Test(arguments: [false, true]) func bumbleAndBtctlMeetOnTheRadio(bluetooth5: Bool) async throws {
        guard BtctlGATTTests.isBuilt(), let python = try BumbleGATTTests.python() else { return }
        let file = BtctlCLITests.temporary("radio-\(bluetooth5).btsnoop")
        let (radio, transports, ports) = try await Self.radio(["--btsnoop", file] + (bluetooth5 ? ["--bluetooth5"] : []))
        let (one, two, port) = (transports[0], transports[1], ports[0])
        // Bumble, as a GATT peripheral, on controller 1 (tcp-client:HOST:PORT).
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_gatt_peripheral.py", port, "--forever"])
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"advertising\"") }, "\(radio.output)\n\(bumble.output)")
        let read = try await BtctlGATTTests.run(["gatt", "read", "F1:F2:F3:F4:F5:F6/random", "--uuid", "FFF1", "-t", two])
        #expect(read.status == 0 && read.out.contains("\"bumble\""), "\(read.out)\n\(bumble.output)")
        #expect(bumble.output.contains("\"peer\": \"C0:FF:EE:00:01:02/P\""), "Bumble saw controller 2's address: \(bumble.output)")
        // Bumble leaves: its controller leaves the radio, and nobody is heard on it any more.
        _ = await bumble.stop()
        #expect(await radio.waitForOutput { $0.contains(#"{"event":"host_disconnected","index":1,"dropped":0}"#) }, "\(radio.output)")
        let scan = try await BtctlGATTTests.run(["scan", "-t", two, "--duration", "0.5", "--json"])
        #expect(scan.status == 0 && !scan.out.contains("F1:F2:F3:F4:F5:F6"), "\(scan.out)")
        // The port takes the next host.
        let info = try await BtctlGATTTests.run(["info", "-t", one, "--json"])
        #expect(info.status == 0 && info.out.contains("\"address\":\"C0:FF:EE:00:01:01\""), "\(info.out)")
        kill(radio.process.processIdentifier, SIGINT)
        let status = await radio.exit(timeout: 20)
        #expect(status == 130, "\(radio.output)")
        #expect(try JSONSchemaTests.check(radio.output, against: "radio").last?["event"] as? String == "stopped", "\(radio.output)")
        // The recording: controller N is adapter N-1; Bumble's Read Response goes to
        // controller 1, btctl's Read Request to controller 2; each host's arrival and
        // departure is a New Index and a Delete Index.
        let shown = try await BtctlGATTTests.run(["trace", "show", file, "--json"])
        let frames = try JSONSchemaTests.check(shown.out, against: "trace-show")
        func on(_ index: Int, _ dir: String, _ att: String) -> Bool {
            frames.contains { $0["index"] as? Int == index && $0["dir"] as? String == dir && $0["att_name"] as? String == att }
        }
        #expect(on(0, "tx", "Read Response") && on(1, "tx", "Read Request"), "\(shown.out.prefix(2000))")
        let enable = bluetooth5 ? "LE Set Extended Advertising Enable" : "LE Set Advertising Enable"
        #expect(frames.contains { $0["index"] as? Int == 0 && $0["dir"] as? String == "tx" && $0["name"] as? String == enable }, "Bumble's \(enable)")
        let indexes = frames.filter { $0["type"] as? String == "monitor" }.compactMap { f in (f["name"] as? String).map { "\($0) \(f["index"] ?? "?")" } }
        #expect(indexes.filter { $0.hasPrefix("New Index") }.sorted() == ["New Index 0", "New Index 0", "New Index 1", "New Index 1"], "\(indexes)")
        #expect(indexes.filter { $0.hasPrefix("Delete Index") }.count == 4, "\(indexes)")
        if let tshark = try Interop.tshark() {
            let malformed = try await Interop.run(tshark, ["-r", file, "-Y", "_ws.malformed || _ws.expert.severity == error"])
            #expect(malformed.isEmpty, "\(malformed)")
        }
    }

    /// Pairing across the radio: Bumble's Security Manager as peripheral on controller
    /// 1, `btctl pair` on controller 2. LE Secure Connections, then the link encrypted
    /// through the virtual controllers (LE Enable Encryption, Bumble's host answering
    /// the LE Long Term Key Request): both sides say so.
    @Test func bumblePairsWithBtctlOverTheRadio() async throws {
        guard BtctlGATTTests.isBuilt(), let python = try BumbleGATTTests.python() else { return }
        let (radio, transports, ports) = try await Self.radio()
        let (two, port) = (transports[1], ports[0])
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_smp_peer.py", port, "peripheral", "1", "0", "none", "0"])
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"advertising\"") }, "\(bumble.output)")
        let pair = try await BtctlGATTTests.run(["pair", "F1:F2:F3:F4:F5:F6/random", "-t", two, "--json"])
        let paired = pair.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .first { $0["event"] as? String == "paired" }
        #expect(pair.status == 0 && paired?["secure_connections"] as? Bool == true && paired?["key_size"] as? Int == 16, "\(pair.out)")
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"encryption\", \"encrypted\": true") }, "\(bumble.output)")
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"paired\", \"ltk\": true") }, "\(bumble.output)")
        _ = await bumble.stop()
        kill(radio.process.processIdentifier, SIGTERM)
        #expect(await radio.exit(timeout: 20) == 143, "\(radio.output)")
    }

    /// Directed advertising with Bumble as its target: `btctl advertise --directed`
    /// Bumble's random static address on controller 1; Bumble's central on controller 2
    /// connects to it, pairs, leaves, and connects again to the advertisement resumed
    /// after the link (still directed) to encrypt from its keys. btctl reports each
    /// link as made by set 0. Then a btctl scan on the target's controller shows another
    /// btctl's advertisement directed to it as `directed`.
    @Test func bumbleConnectsToADirectedAdvertisementForIt() async throws {
        guard BtctlGATTTests.isBuilt(), let python = try BumbleGATTTests.python() else { return }
        let (radio, transports, ports) = try await Self.radio()
        let (one, two) = (transports[0], transports[1])
        let advertise = try LiveProcess(BtctlGATTTests.btctl, ["advertise", "-t", one, "--directed", "F1:F2:F3:F4:F5:F6/random", "--duration", "30", "--json"])
        #expect(await advertise.waitForOutput { $0.contains("\"directed\":\"F1:F2:F3:F4:F5:F6/random\"") }, "\(advertise.output)")
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_smp_peer.py", ports[1], "central", "1", "0", "none", "0", "C0:FF:EE:00:01:01"])
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"done\"") }, "\(bumble.output)\n\(advertise.output)")
        #expect(bumble.output.contains("\"event\": \"secured\", \"round\": 1, \"encrypted\": true"), "\(bumble.output)")
        let links = advertise.output.split(separator: "\n").filter { $0.contains("\"event\":\"connected\"") }
        #expect(links.count == 2 && links.allSatisfy { $0.contains("\"peer\":\"F1:F2:F3:F4:F5:F6\"") }, "\(advertise.output)")
        _ = await bumble.stop()
        _ = await advertise.stop()
        // Two btctl processes: one directs its advertisement to the other's controller,
        // whose scan shows it as directed.
        let aimed = try LiveProcess(BtctlGATTTests.btctl, ["advertise", "-t", one, "--directed", "C0:FF:EE:00:01:02", "--duration", "30"])
        #expect(await aimed.waitForOutput { $0.contains("directed to C0:FF:EE:00:01:02") }, "\(aimed.output)")
        let scan = try await BtctlGATTTests.run(["scan", "-t", two, "--duration", "1"])
        #expect(scan.out.split(separator: "\n").contains { $0.hasPrefix("C0:FF:EE:00:01:01") && $0.contains("directed") }, "\(scan.out)")
        _ = await aimed.stop()
        kill(radio.process.processIdentifier, SIGTERM)
        _ = await radio.exit(timeout: 20)
    }

    /// `--distance`: the fire-alarm sender 10 m from controller 1 and, by default, 1 m
    /// from controller 2. A btctl scan on each hears it 20 dB apart (the radio's
    /// path-loss exponent is 2: 20 log10(10)), and estimates those distances from the
    /// TX Power it advertises.
    @Test func distancesSetTheRSSIScannersHear() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let radio = try LiveProcess(BtctlGATTTests.btctl, ["radio", "--controllers", "2", "--json", "--fire-alarm", "--distance", "1,fire-alarm,10"])
        #expect(await radio.waitForOutput { Self.ports($0).count == 2 }, "\(radio.output)")
        let found = Self.ports(radio.output)
        func heard(on transport: String?) async throws -> [String: Any]? {
            let scan = try await BtctlGATTTests.run(["scan", "-t", try #require(transport), "--duration", "0.5", "--json"])
            #expect(scan.status == 0, "\(scan.out)")
            return try JSONSchemaTests.check(scan.out, against: "scan").first { $0["event"] as? String == "advertisement" && $0["name"] as? String == "FireAlarm-B3" }
        }
        let far = try #require(try await heard(on: found[1])), near = try #require(try await heard(on: found[2]))
        kill(radio.process.processIdentifier, SIGTERM)
        #expect(await radio.exit(timeout: 20) == 143, "\(radio.output)")
        let (farRSSI, nearRSSI) = (try #require(far["rssi"] as? Int), try #require(near["rssi"] as? Int))
        #expect(nearRSSI - farRSSI == 20, "\(near) \(far)")
        #expect(far["distance_m"] as? Double == 10 && near["distance_m"] as? Double == 1, "\(far) \(near)")
    }

    @Test func argumentsAreChecked() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        for (args, says) in [(["--controllers", "0"], "--controllers must be 1 to 16"), (["--tick", "0"], "--tick must be between 1 and 10000"),
                             (["--port", "65535", "--controllers", "2"], "leaves no room for 2 ports"),
                             (["--distance", "1,2"], "takes A,B,METRES"), (["--distance", "1,3,2"], "3 is neither a controller (1 to 2)"),
                             (["--distance", "1,fire-alarm,2"], "fire-alarm needs --fire-alarm"), (["--distance", "2,2,5"], "names one device twice"),
                             (["--distance", "1,2,0"], "the metres must be 0.1 to 10000"), (["--distance", "1,2,nan"], "the metres must be")] {
            let bad = try await BtctlCLITests.run(["radio"] + args)
            #expect(bad.status == 64 && bad.out.contains(says) && bad.out.contains("Usage: btctl radio"), "\(bad.out)")
        }
    }
}
