// Extended advertising pieces that Rootcanal does not exercise: reports split by the
// controller ("incomplete, more to come"), truncated ones, and data over 251 bytes
// split into LE Set Extended Advertising Data operations.

import GAP
import HCI
import Testing

@Suite(.timeLimit(.minutes(3)))
struct ExtendedAdvertisingTests {
    func report(_ status: UInt16, _ data: [UInt8], scanResponse: Bool = false, sid: UInt8 = 1) -> LEExtendedAdvertisingReport.Report {
        LEExtendedAdvertisingReport.Report(eventType: 0x01 | (scanResponse ? 0x08 : 0) | status << 5, addressType: .random,
                                           address: BluetoothAddress("C1:00:00:00:00:01")!, advertisingSID: sid, rssi: -50, data: data)
    }

    @Test func piecesAreJoinedPerAdvertiserAndSet() {
        var a = ExtendedReportAssembler()
        let name = ADStructure.encode([ADStructure(type: 9, data: Array("a long extended name".utf8))])
        #expect(a.add(report(1, Array(name.prefix(10)))) == nil)
        // Another set of the same advertiser does not mix in.
        let other = a.add(report(0, [2, 1, 6], sid: 2))
        #expect(other?.data.flags == 6)
        let whole = a.add(report(0, Array(name.dropFirst(10))))
        #expect(whole?.raw == name)
        #expect(whole?.data.localName == "a long extended name")
        #expect(whole?.isConnectable == true && whole?.isScanResponse == false)
    }

    @Test func truncatedReportsAreDeliveredAndCounted() {
        var a = ExtendedReportAssembler()
        _ = a.add(report(1, [2, 1]))
        let cut = a.add(report(2, [6], scanResponse: false))
        #expect(cut?.raw == [2, 1, 6])
        #expect(a.truncated == 1)
        #expect(a.add(report(0, [], scanResponse: true))?.isScanResponse == true)
    }

    @Test func eventTypesMapToTheLegacyNames() {
        func type(_ t: UInt16) -> UInt8 {
            Advertisement(extended: LEExtendedAdvertisingReport.Report(eventType: t, addressType: .public, address: .zero, rssi: 0, data: []), data: []).eventType
        }
        #expect(type(0x13) == 0)  // legacy ADV_IND
        #expect(type(0x15) == 1)  // legacy ADV_DIRECT_IND
        #expect(type(0x12) == 2)  // legacy ADV_SCAN_IND
        #expect(type(0x10) == 3)  // legacy ADV_NONCONN_IND
        #expect(type(0x1B) == 4)  // legacy SCAN_RSP to ADV_IND
        #expect(type(0x01) == 0)  // extended connectable
        #expect(type(0x00) == 3)  // extended non-connectable, non-scannable
    }
}

import BLETesting
import Logging

@Suite(.timeLimit(.minutes(3)))
struct ExtendedAdvertiserTests {
    @Test func dataOver251BytesGoesInOperations() async throws {
        let t = ScriptedTransport()
        // Every command succeeds (Command Complete, status 0, plus the TX power for the parameters).
        t.respond { p in
            guard case let .command(op, _) = p else { return [] }
            let r: [UInt8] = op == .leSetExtendedAdvertisingParameters ? [0, 0] : [0]
            return [HCIEvent.commandComplete(CommandComplete(commandOpcode: op, returnParameters: r)).packet]
        }
        let c = HCIController(transport: t, logger: Logger(label: "t") { _ in SwiftLogNoOpLogHandler() })
        var ad = AdvertisingData()
        ad.manufacturerData = [.init(companyIdentifier: 0x05F1, data: Array(repeating: 7, count: 400))]
        // Non-connectable: chained PDUs carry it (connectable advertising holds 246 octets, below).
        try await Advertiser.startExtended(c, data: ad, connectable: false, maximumLength: 1650)
        let payloads = t.sent.compactMap { p -> LESetExtendedAdvertisingData? in
            guard case let .command(op, params) = p, op == .leSetExtendedAdvertisingData else { return nil }
            var r = ByteReader(params)
            return try? LESetExtendedAdvertisingData(parameters: &r)
        }
        #expect(payloads.map(\.operation) == [1, 2])
        #expect(payloads.flatMap(\.data) == ad.bytes)
        // Extended, neither connectable nor scannable, not legacy.
        let params = t.sent.compactMap { p -> LESetExtendedAdvertisingParameters? in
            guard case let .command(op, b) = p, op == .leSetExtendedAdvertisingParameters else { return nil }
            var r = ByteReader(b)
            return try? LESetExtendedAdvertisingParameters(parameters: &r)
        }
        #expect(params.map(\.advertisingEventProperties) == [0x00])
        // Connectable: one AUX_ADV_IND, refused before anything is sent.
        let before = t.sent.count
        await #expect(throws: AdvertisingDataError.tooLong(length: ad.bytes.count, limit: 246)) {
            try await Advertiser.startExtended(c, data: ad, connectable: true, maximumLength: 1650)
        }
        // Beyond the controller's maximum: refused before anything is sent.
        await #expect(throws: AdvertisingDataError.tooLong(length: ad.bytes.count, limit: 300)) {
            try await Advertiser.startExtended(c, data: ad, connectable: false, maximumLength: 300)
        }
        #expect(t.sent.count == before)
        await c.close()
    }
}
