// Our peripheral (the BLE facade) against Bumble as a hostile central, on Rootcanal:
// Bumble's ATT and SMP layers are taken off its side of the link and
// bumble_hostile_central.py sends malformed and out-of-place PDUs as raw L2CAP frames
// through its own host and Rootcanal's controller. Each gets the answer the Core
// Specification gives it (Vol 3 Part F §3.3, §3.4; Part A §4; Part H §3.5), and the
// link keeps serving after each that gets none.

import BLE
import BLETesting
import Foundation
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleHostileCentralTests {
    @Test func everyHostilePDUGetsTheSpecsAnswer() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        // EATT on: Bumble opens an enhanced bearer at the end.
        let host = BluetoothHost(transport: try TransportSpec(parsing: rc.transportSpec).open(logger: Interop.logger),
                                 logger: Interop.logger, enhancedATT: true)
        let info = try await host.start()
        let value = Characteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write, .indicate], value: [7])
        let long = Characteristic(uuid: BluetoothUUID(0xFFF2), properties: [.read], value: (0..<300).map { UInt8($0 & 0xFF) })
        try await host.peripheral.add(Service(uuid: BluetoothUUID(0xFFF0), characteristics: [value, long]))
        let v = try await host.peripheral.handles(of: value), l = try await host.peripheral.handles(of: long)
        let cccd = try #require(v.clientConfiguration)
        // Channels Bumble opens get MTU 64, MPS 30 and 2 credits, and are held unread:
        // no credit goes back, so the third K-frame is one too many.
        let channels = await host.publishChannel(spsm: 0x0081, parameters: CreditBasedParameters(mtu: 64, mps: 30, initialCredits: 2))
        let holder = Task { var held: [L2CAPChannel] = []; for await c in channels { held.append(c) }; return held.count }
        try await host.peripheral.startAdvertising(AdvertisingData())
        let out = try await Interop.execute(python, [Interop.root + "/Tests/InteropTests/bumble_hostile_central.py", String(rc.hciPort),
                                               info.address.description, String(v.value), String(cccd), String(l.value)],
                                            timeout: 120).out
        await host.close()
        let accepted = await holder.value
        let lines = out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        var got: [String: String] = [:]
        for l in lines where l["event"] as? String == "case" {
            if let name = l["name"] as? String { got[name] = l["got"] as? String ?? "none" }
        }
        func le(_ x: UInt16) -> String { [UInt8(x & 0xFF), UInt8(x >> 8)].hexString }
        let served = "0b07"  // the Read Response for VALUE that follows each case answered by nothing
        let expected: KeyValuePairs<String, String> = [
            // ATT: Error Response 01 <request opcode> <handle> <code> (§3.4.1.1).
            "read handle 0": "010a000001",
            "read a handle past the database": "010affff01",
            "read request one octet short": "010a000004",
            "find information from handle 0": "0104000001",
            "find information start after end": "0104050001",
            "find by type value from handle 0": "0106000001",
            "read by group type of characteristics": "0110010010",
            "read by type with a 3-octet UUID": "0108000004",
            "read multiple with one handle": "010e000004",
            "read blob past the end": "010c" + le(l.value) + "07",
            "read blob at the end": "0d",
            "write a read-only value": "0112" + le(l.value) + "03",
            "write one octet to a CCCD": "0112" + le(cccd) + "0d",
            // Client Characteristic Configuration Descriptor Improperly Configured (0xFD), as BlueZ answers.
            "notifications from a CCCD that only indicates": "0112" + le(cccd) + "fd",
            "write command to a read-only value": "none",
            "write command to a read-only value: still served": served,
            // No CSRK from a pairing: nothing to verify with, so ignored (§3.4.5.4).
            "signed write with no signing key": "none",
            "signed write with no signing key: still served": served,
            "unknown request opcode": "0130000006",
            "unknown command opcode": "none",
            "unknown command opcode: still served": served,
            "prepare write longer than ATT_MTU": "0116000004",
            "prepare write to a read-only value": "0116" + le(l.value) + "03",
            "execute write with reserved flags": "0118000004",
            "execute write with nothing prepared": "19",
            "the client's indication": "1e",
            "a confirmation nobody asked for": "none",
            "a confirmation nobody asked for: still served": served,
            // Our Rx MTU (517); a client's 22 leaves ATT_MTU at 23, so a read carries 22 octets.
            "exchange MTU below the minimum": "03" + le(517),
            "read the long value after that exchange": "0b" + (0..<22).map { UInt8($0) }.hexString,
            // LE signaling: Command Reject 01 <id> 02|06 00 <reason> [data] (Part A §4.1).
            "disconnection request for an unknown CID": "01070600" + "0200" + "40004100",
            "unknown signaling code": "010802000000",
            "signaling length longer than the frame": "010902000000",
            "connection parameter update request from the central": "010a02000000",
            "LE credit based connection to an unused SPSM": "150b0a00" + "0000000000000000" + "0200",
            "signaling identifier 0": "none",
            "signaling identifier 0: still served": served,
            // Broken L2CAP framing in raw ACL (Part A §3, §7.2): nothing answered, the
            // partial or overlong frame discarded, the next read served.
            "B-frame shorter than its length field": "none",
            "B-frame shorter than its length field: still served": served,
            "continuing fragment with no start": "none",
            "continuing fragment with no start: still served": served,
            "B-frame longer than its length field": "none",
            "B-frame longer than its length field: still served": served,
            // SMP: Pairing Failed 05 <reason> (Part H §3.5.5): Invalid Parameters for a wrong
            // length, Unspecified Reason out of sequence, Command Not Supported for an unknown code.
            "pairing request one octet short": "050a",
            "pairing confirm before any pairing request": "0508",
            "unknown SMP code": "0507",
            // Maximum key size below 7: Encryption Key Size (BlueZ and Zephyr answer so).
            "pairing request with a 6-octet key": "0506",
        ]
        #expect(lines.contains { $0["event"] as? String == "done" }, "\(out)")
        #expect(got.count == expected.count, "\(out)")
        for (name, answer) in expected { #expect(got[name] == answer, "\(name)") }

        // Each channel opens (our DCID, MTU 64, MPS 30, 2 credits, success), then its
        // violation draws our Disconnection Request for it (Part A §10.1, §4.24).
        let channelCases = lines.filter { $0["event"] as? String == "channel-case" }
        #expect(channelCases.count == 4, "\(out)")
        #expect(accepted == 4)
        for (c, scid) in zip(channelCases, [UInt16(0x50), 0x51, 0x52, 0x53]) {
            let name = c["name"] as? String ?? "?"
            let response = c["response"] as? String ?? "none"
            #expect(response.hasPrefix("15200a00") && response.hasSuffix("4000" + "1e00" + "0200" + "0000"), "\(name): \(response)")
            let dcid = response.count == 28 ? String(Array(response)[8..<12]) : "?"
            // Its Destination CID is Bumble's endpoint, its Source CID ours (§4.6).
            #expect(c["got"] as? String == "06000400" + le(scid) + dcid, "\(name): \(c["got"] ?? "none")")
        }

        // EATT: refused on the unencrypted link (Part G §5.3.2: the channel shall be
        // encrypted) with "insufficient authentication" and no Destination CID; once
        // Bumble has paired, a bearer with one credit: the second answer waits for a
        // credit (never sent without one, Part A §10.1) while the unenhanced bearer
        // answers at once; the credits release it; Exchange MTU on an enhanced bearer
        // is Request Not Supported.
        var eatt: [String: String] = [:]
        for c in lines where c["event"] as? String == "eatt-case" {
            if let name = c["name"] as? String { eatt[name] = c["got"] as? String ?? "none" }
        }
        let refused = eatt["enhanced bearer, unencrypted"] ?? "none"
        #expect(refused.hasPrefix("183f0a00") && refused.count == 28 && String(Array(refused)[20..<28]) == "0500" + "0000", "\(refused)")
        #expect(lines.first { $0["event"] as? String == "paired" }?["encrypted"] as? Bool == true, "\(lines)")
        let bearer = eatt["enhanced bearer"] ?? "none"
        // Credit Based Connection Response: MTU, MPS, credits for Bumble, success, one DCID.
        #expect(bearer.hasPrefix("18400a00") && bearer.count == 28 && String(Array(bearer)[20..<24]) == "0000", "\(bearer)")
        #expect(eatt["read on the one credit"] == "0200" + "0b07")
        #expect(eatt["read with no credit left"] == "none")
        #expect(eatt["meanwhile on the unenhanced bearer"] == "0b07")
        #expect(eatt["after two credits"] == "0200" + "0b07")
        #expect(eatt["exchange MTU on the enhanced bearer"] == "0500" + "0102000006")
    }
}
