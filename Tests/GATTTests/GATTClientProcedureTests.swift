// The client procedures as state machines: against our server's state machine
// (round trips), and against a hostile server whose answers break §4's rules
// (handle 0x0000, handles that repeat or go backwards, entries outside the range,
// wrong lengths). Each must end with the `GATTClientError` naming the violation,
// never trap and never ask again for what it was already told.

import ATT
import HCI
import Testing
@testable import GATT

@Suite(.timeLimit(.minutes(3)))
struct GATTClientProcedureTests {
    /// Runs `procedure` against `server`, counting requests; stops after 100 requests.
    func drive<P: GATTClientProcedure>(_ procedure: P, _ server: inout GATTServerState, mtu: Int) throws -> (P.Output, Int) {
        var p = procedure
        var step = p.start()
        var requests = 0
        while true {
            switch step {
            case let .finished(o): return (o, requests)
            case let .request(pdu):
                requests += 1
                guard requests < 100 else { throw GATTClientError.unexpectedResponse(pdu.opcode) }
                guard let answer = server.handle(pdu, connection: 1, mtu: mtu).response else { throw GATTClientError.emptyResponse(pdu.opcode) }
                step = try p.receive(answer)
            }
        }
    }

    /// Feeds `answers` in order; returns the requests sent and the error that ended it.
    func hostile<P: GATTClientProcedure>(_ procedure: P, _ answers: [ATTPDU]) -> (requests: [ATTPDU], error: GATTClientError?) {
        var p = procedure
        var sent: [ATTPDU] = []
        guard case let .request(first) = p.start() else { return ([], nil) }
        sent.append(first)
        for a in answers {
            do {
                guard case let .request(next) = try p.receive(a) else { return (sent, nil) }
                sent.append(next)
            } catch {
                return (sent, error)
            }
        }
        return (sent, nil)
    }

    /// Three services (two 16-bit, one 128-bit UUID), nine characteristics, three descriptors.
    static func database() throws -> AttributeDatabase {
        var db = AttributeDatabase()
        try db.add(GATTService(uuid: BluetoothUUID(0x1800), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A00), properties: [.read], value: Array("name".utf8)),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A01), properties: [.read], value: [0, 0]),
        ]))
        try db.add(GATTService(uuid: BluetoothUUID(0x180F), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [100]),
            GATTCharacteristic(uuid: BluetoothUUID(0x2A1A), properties: [.read], value: [1]),
        ]))
        try db.add(GATTService(uuid: BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")!, characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read, .write], value: [1]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF2), properties: [.notify], value: [2]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF3), properties: [.indicate], value: [3]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF4), properties: [.read], value: [4]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF5), properties: [.read], value: [5]),
        ]))
        return db
    }

    @Test(arguments: [247, 23])
    func discoveryOfEverythingTakesFewRequests(mtu: Int) throws {
        var server = GATTServerState(database: try Self.database())
        let (services, a) = try drive(PrimaryServiceDiscovery(mtu: mtu), &server, mtu: mtu)
        #expect(services.count == 3)
        let (chars, b) = try drive(CharacteristicDiscovery(services: services, mtu: mtu), &server, mtu: mtu)
        #expect(chars.map(\.count) == [2, 2, 5])
        let (descriptors, c) = try drive(DescriptorDiscovery(characteristics: chars.flatMap { $0 }, mtu: mtu), &server, mtu: mtu)
        #expect(descriptors.flatMap { $0 }.count == 3)
        #expect(descriptors.flatMap { $0 }.allSatisfy { $0.uuid == GATTType.clientCharacteristicConfiguration })
        // The characteristic that ends a service ends with it; the others before the next declaration.
        let all = chars.flatMap { $0 }
        #expect(all[1].end == services[0].end)
        #expect(all[2].end == all[3].declarationHandle - 1)
        if mtu == 247 {
            // Services: the 16-bit pair, the 128-bit one, then Attribute Not Found (3);
            // characteristics of all services in one range plus its closing request (2);
            // descriptors of all nine in one Find Information (1). Bumble's client takes 12.
            #expect(a + b + c == 6, "services \(a), characteristics \(b), descriptors \(c)")
        }
    }

    @Test func readLongStopsAtAShortPiece() throws {
        var db = AttributeDatabase()
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read], value: (0..<300).map { UInt8($0 & 0xFF) }),
        ]))
        var server = GATTServerState(database: db)
        let (value, n) = try drive(ReadLongProcedure(handle: s.characteristicValues[0], mtu: 23), &server, mtu: 23)
        #expect(value == (0..<300).map { UInt8($0 & 0xFF) })
        #expect(n == 14)  // 22 bytes per piece: 13 full pieces, then 14 bytes
    }

    // MARK: A hostile server

    @Test func characteristicDeclarationAtHandleZeroIsAnError() {
        let service = DiscoveredService(uuid: BluetoothUUID(0x180F), start: 1, end: 7, isPrimary: true)
        let r = hostile(CharacteristicDiscovery(services: [service], mtu: 23), [
            .readByTypeResponse([.init(handle: 0, value: [0x02, 0x01, 0x00, 0x19, 0x2A]), .init(handle: 2, value: [0x02, 0x03, 0x00, 0x1A, 0x2A])]),
        ])
        #expect(r.error == .handleOutOfRange(.readByTypeResponse, handle: 0, range: 1...7))
        #expect(r.requests.count == 1)
    }

    @Test func repeatingHandlesEndEachDiscovery() {
        let service = DiscoveredService(uuid: BluetoothUUID(0x180F), start: 1, end: 7, isPrimary: true)
        let decl = ATTPDU.readByTypeResponse([.init(handle: 2, value: [0x02, 0x03, 0x00, 0x19, 0x2A])])
        let chars = hostile(CharacteristicDiscovery(services: [service], mtu: 23), [decl, decl, decl])
        #expect(chars.error == .handleOutOfRange(.readByTypeResponse, handle: 2, range: 3...7))
        #expect(chars.requests.count == 2)

        let include = ATTPDU.readByTypeResponse([.init(handle: 2, value: [0x08, 0x00, 0x09, 0x00, 0x0F, 0x18])])
        let incs = hostile(IncludedServiceDiscovery(service: service, mtu: 23), [include, include])
        #expect(incs.error == .handleOutOfRange(.readByTypeResponse, handle: 2, range: 3...7))

        let c = DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A19), declarationHandle: 2, valueHandle: 3, properties: [.notify], end: 7)
        let info = ATTPDU.findInformationResponse([.init(handle: 5, uuid: BluetoothUUID(0x2902)), .init(handle: 4, uuid: BluetoothUUID(0x2901))])
        let ds = hostile(DescriptorDiscovery(characteristics: [c], mtu: 23), [info])
        #expect(ds.error == .handlesNotIncreasing(.findInformationResponse, previous: 5, handle: 4))

        let groups = ATTPDU.readByGroupTypeResponse([.init(handle: 1, groupEnd: 5, value: [0x0F, 0x18])])
        let svcs = hostile(PrimaryServiceDiscovery(mtu: 23), [groups, groups])
        #expect(svcs.error == .handleOutOfRange(.readByGroupTypeResponse, handle: 1, range: 6...0xFFFF))
    }

    @Test func entriesThatBreakTheLayoutAreErrors() {
        let service = DiscoveredService(uuid: BluetoothUUID(0x180F), start: 1, end: 7, isPrimary: true)
        // A value handle before its declaration.
        var r = hostile(CharacteristicDiscovery(services: [service], mtu: 23), [
            .readByTypeResponse([.init(handle: 3, value: [0x02, 0x02, 0x00, 0x19, 0x2A])]),
        ])
        #expect(r.error == .malformedEntry(.readByTypeResponse, handle: 3, reason: "value handle 0x0002 is not after its declaration"))
        // A value handle past the next declaration.
        r = hostile(CharacteristicDiscovery(services: [service], mtu: 23), [
            .readByTypeResponse([.init(handle: 2, value: [0x02, 0x05, 0x00, 0x19, 0x2A]), .init(handle: 4, value: [0x02, 0x05, 0x00, 0x1A, 0x2A])]),
            .errorResponse(request: .readByTypeRequest, handle: 5, error: .attributeNotFound),
        ])
        if case .malformedEntry(_, 2, _)? = r.error {} else { Issue.record("got \(String(describing: r.error))") }
        // A declaration of a length §3.3.1 does not define.
        r = hostile(CharacteristicDiscovery(services: [service], mtu: 23), [.readByTypeResponse([.init(handle: 2, value: [0x02, 0x03, 0x00])])])
        #expect(r.error == .malformedEntry(.readByTypeResponse, handle: 2, reason: "a characteristic declaration of 3 bytes"))
        // A group that ends before it starts, and an entry beyond the service.
        let s = hostile(PrimaryServiceDiscovery(mtu: 23), [.readByGroupTypeResponse([.init(handle: 5, groupEnd: 4, value: [0x0F, 0x18])])])
        #expect(s.error == .malformedEntry(.readByGroupTypeResponse, handle: 5, reason: "group ends at 0x0004"))
        r = hostile(CharacteristicDiscovery(services: [service], mtu: 23), [.readByTypeResponse([.init(handle: 9, value: [0x02, 0x0A, 0x00, 0x19, 0x2A])])])
        #expect(r.error == .handleOutOfRange(.readByTypeResponse, handle: 9, range: 1...7))
        // The wrong response, an empty one, one longer than ATT_MTU, another error.
        #expect(hostile(PrimaryServiceDiscovery(mtu: 23), [.readResponse(value: [])]).error == .unexpectedResponse(.readResponse))
        #expect(hostile(PrimaryServiceDiscovery(mtu: 23), [.readByGroupTypeResponse([])]).error == .emptyResponse(.readByGroupTypeResponse))
        #expect(hostile(ReadLongProcedure(handle: 3, mtu: 23), [.readResponse(value: Array(repeating: 0, count: 30))]).error
            == .responseExceedsMTU(.readResponse, length: 31, mtu: 23))
        #expect(hostile(ReadLongProcedure(handle: 3, mtu: 23), [.errorResponse(request: .readRequest, handle: 3, error: .readNotPermitted)]).error
            == .att(.errorResponse(request: .readRequest, handle: 3, error: .readNotPermitted)))
    }

    /// Several values at once (§4.8.5): against our server at ATT_MTU 23, a long value
    /// the response cut short is read on its own, the values after it in another
    /// request; every value whole and in order.
    @Test func readValuesCompletesWhatTheResponseCutShort() throws {
        var db = AttributeDatabase()
        let long = (0..<60).map { UInt8($0) }
        let s = try db.add(GATTService(uuid: BluetoothUUID(0xFFF0), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF1), properties: [.read], value: [1, 2, 3]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF2), properties: [.read], value: long),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF3), properties: [.read], value: [9]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF4), properties: [.read], value: []),
        ]))
        let h = s.characteristicValues
        var server = GATTServerState(database: db)
        // The server's response: each value after its whole length, the list cut at 22 octets.
        let answer = server.handle(.readMultipleVariableRequest(handles: [h[0], h[1], h[2]]), connection: 1, mtu: 23).response
        #expect(answer?.bytes == [0x21, 3, 0, 1, 2, 3, 60, 0] + Array(long.prefix(15)))
        let (values, n) = try drive(ReadValuesProcedure(handles: [h[0], h[1], h[2], h[3]], mtu: 23), &server, mtu: 23)
        #expect(values == [[1, 2, 3], long, [9], []])
        // One request for all four (FFF3 and FFF4 left out), one for the two left out,
        // then FFF2 alone: a read and two blobs.
        #expect(n == 5)
        // One handle: a plain read.
        #expect(try drive(ReadValuesProcedure(handles: [h[2]], mtu: 23), &server, mtu: 23) == ([[9]], 1))
        #expect(try drive(ReadValuesProcedure(handles: [], mtu: 23), &server, mtu: 23) == ([], 0))
    }

    /// What a server gets wrong in Read Multiple Variable Length Response, and what it
    /// may lack: each ends the procedure with its error, or falls back to plain reads.
    @Test func readValuesChecksTheResponse() {
        let two = ReadValuesProcedure(handles: [3, 5], mtu: 23)
        let op = ATTOpcode.readMultipleVariableResponse
        #expect(hostile(two, [.readMultipleVariableResponse(values: [])]).error == .emptyResponse(op))
        #expect(hostile(two, [.readMultipleVariableResponse(values: [.init([1]), .init([2]), .init([3])])]).error
            == .malformedEntry(op, handle: 3, reason: "3 values for 2 handles"))
        #expect(hostile(two, [.readMultipleVariableResponse(values: [.init(length: 4, value: [1]), .init([2])])]).error
            == .malformedEntry(op, handle: 3, reason: "1 of 4 octets before another value; only the last is cut short"))
        #expect(hostile(two, [.errorResponse(request: .readMultipleVariableRequest, handle: 5, error: .readNotPermitted)]).error
            == .att(.errorResponse(request: .readMultipleVariableRequest, handle: 5, error: .readNotPermitted)))
        #expect(hostile(two, [.readResponse(value: [1])]).error == .unexpectedResponse(.readResponse))
        // Request Not Supported, or a response longer than ATT_MTU (Bumble's): one read per value.
        for first in [ATTPDU.errorResponse(request: .readMultipleVariableRequest, handle: 3, error: .requestNotSupported),
                      .readMultipleVariableResponse(values: [.init([1]), .init(Array(repeating: 2, count: 20))])] {
            let r = hostile(two, [first, .readResponse(value: [1]), .readResponse(value: [2])])
            #expect(r.error == nil && r.requests == [.readMultipleVariableRequest(handles: [3, 5]), .readRequest(handle: 3), .readRequest(handle: 5)])
        }
        // As many handles as one request holds at ATT_MTU 23: 11.
        let many = hostile(ReadValuesProcedure(handles: Array(1...12), mtu: 23), [])
        #expect(many.requests == [.readMultipleVariableRequest(handles: Array(1...11))])
    }

    @Test func readLongEndsEvenWhenEveryPieceIsFull() {
        // A server that always answers a full piece: the value stops at 512 bytes.
        let full = ATTPDU.readBlobResponse(value: Array(repeating: 7, count: 22))
        let r = hostile(ReadLongProcedure(handle: 3, mtu: 23), [.readResponse(value: Array(repeating: 7, count: 22))] + Array(repeating: full, count: 40))
        #expect(r.error == nil)
        #expect(r.requests.count == 24)  // 1 read + 23 blobs: 24 × 22 = 528 ≥ 512
    }

    /// Long and reliable writes (§4.9.4, §4.9.5): against our server, the value lands;
    /// against a hostile one, a changed echo or a refused piece after a queued one is
    /// cancelled (Execute Write 0x00) before the error, a refused first piece is not.
    @Test func preparedWritesCheckEachEchoAndCancelWhatWasQueued() throws {
        let db = try Self.database()
        var server = GATTServerState(database: db)
        // 0xFFF1's value (read and write, in the 128-bit service): its attribute's type is its UUID.
        let h = try #require(db.attributes.first { $0.type == BluetoothUUID(0xFFF1) }?.handle)
        #expect(server.handle(.readRequest(handle: h), connection: 1, mtu: 23).response == .readResponse(value: [1]))
        let value = (0..<40).map { UInt8($0) }
        let ((), requests) = try drive(PreparedWriteProcedure(writes: [(h, value)], mtu: 23), &server, mtu: 23)
        #expect(requests == 4)  // 18 + 18 + 4 octets, then Execute Write
        #expect(server.database.attribute(h)?.value == value)

        let write = PreparedWriteProcedure(writes: [(h, value)], mtu: 23)
        let first = ATTPDU.prepareWriteRequest(handle: h, offset: 0, value: Array(value[0..<18]))
        let cancel = ATTPDU.executeWriteRequest(flags: 0)
        // The echo comes back changed: cancelled, then the mismatch.
        var r = hostile(write, [.prepareWriteResponse(handle: h, offset: 0, value: Array(value[0..<17]) + [0xFF]), .executeWriteResponse])
        #expect(r.requests == [first, cancel] && r.error == .preparedWriteMismatch(handle: h))
        // The second piece refused: the first is cancelled, then the refusal.
        let full = ATTPDU.errorResponse(request: .prepareWriteRequest, handle: h, error: .prepareQueueFull)
        r = hostile(write, [.prepareWriteResponse(handle: h, offset: 0, value: Array(value[0..<18])), full, .executeWriteResponse])
        #expect(r.requests.last == cancel && r.error == .att(.errorResponse(request: .prepareWriteRequest, handle: h, error: .prepareQueueFull)))
        // The cancel's own answer does not matter: the first error is the one reported.
        r = hostile(write, [.prepareWriteResponse(handle: h, offset: 0, value: Array(value[0..<18])), full, full])
        #expect(r.error == .att(.errorResponse(request: .prepareWriteRequest, handle: h, error: .prepareQueueFull)))
        // The first piece refused: nothing queued, nothing to cancel.
        r = hostile(write, [full])
        #expect(r.requests == [first] && r.error == .att(.errorResponse(request: .prepareWriteRequest, handle: h, error: .prepareQueueFull)))
        // Execute Write refused: that error.
        let execute = [ATTPDU.prepareWriteResponse(handle: h, offset: 0, value: Array(value[0..<18])),
                       .prepareWriteResponse(handle: h, offset: 18, value: Array(value[18..<36])),
                       .prepareWriteResponse(handle: h, offset: 36, value: Array(value[36..<40])),
                       .errorResponse(request: .executeWriteRequest, handle: h, error: .invalidAttributeValueLength)]
        r = hostile(write, execute)
        #expect(r.requests.last == .executeWriteRequest(flags: 1)
                && r.error == .att(.errorResponse(request: .executeWriteRequest, handle: h, error: .invalidAttributeValueLength)))
    }

    /// Read Using Characteristic UUID (§4.8.2): against our server, the match; against a
    /// hostile one, handles outside the range or out of order are errors, not results.
    @Test func readByUUIDChecksTheHandles() throws {
        var server = GATTServerState(database: try Self.database())
        let (found, requests) = try drive(ReadByUUIDProcedure(uuid: BluetoothUUID(0x2A19), range: 1...0xFFFF, mtu: 23), &server, mtu: 23)
        #expect(requests == 1 && found.map(\.value) == [[100]])
        let (none, _) = try drive(ReadByUUIDProcedure(uuid: BluetoothUUID(0x2B3A), range: 1...0xFFFF, mtu: 23), &server, mtu: 23)
        #expect(none.isEmpty)
        let ask = ReadByUUIDProcedure(uuid: BluetoothUUID(0x2A19), range: 5...9, mtu: 23)
        #expect(hostile(ask, [.readByTypeResponse([.init(handle: 4, value: [1])])]).error
                == .handleOutOfRange(.readByTypeResponse, handle: 4, range: 5...9))
        #expect(hostile(ask, [.readByTypeResponse([.init(handle: 7, value: [1]), .init(handle: 6, value: [2])])]).error
                == .handlesNotIncreasing(.readByTypeResponse, previous: 7, handle: 6))
        #expect(hostile(ask, [.readByTypeResponse([.init(handle: 10, value: [1])])]).error
                == .handleOutOfRange(.readByTypeResponse, handle: 10, range: 5...9))
        #expect(hostile(ask, [.errorResponse(request: .readByTypeRequest, handle: 5, error: .readNotPermitted)]).error
                == .att(.errorResponse(request: .readByTypeRequest, handle: 5, error: .readNotPermitted)))
    }

    /// Read Using Characteristic UUID for every match (`all`): Read By Type Requests
    /// after the last handle until Attribute Not Found, values of ATT_MTU − 4 octets
    /// (maybe cut) completed with Read Blob; a hostile server's handle repeated across
    /// responses, or a wrong answer to the Read Blob, ends it with the error.
    @Test func readByUUIDForEveryMatchReadsThemWhole() throws {
        var db = AttributeDatabase()
        let long = (0..<40).map { UInt8($0) }, edge = [UInt8](repeating: 7, count: 19)
        try db.add(GATTService(uuid: BluetoothUUID(0xAAAA), characteristics: [
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF9), properties: [.read], value: [1]),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF9), properties: [.read], value: long),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF9), properties: [.read], value: edge),
            GATTCharacteristic(uuid: BluetoothUUID(0xFFF8), properties: [.read], value: [2]),
        ]))
        var server = GATTServerState(database: db)
        let (found, requests) = try drive(ReadByUUIDProcedure(uuid: BluetoothUUID(0xFFF9), range: 1...0xFFFF, mtu: 23, all: true), &server, mtu: 23)
        #expect(found.map(\.handle) == [3, 5, 7] && found.map(\.value) == [[1], long, edge], "\(found)")
        // Four Read By Type (the last answered Attribute Not Found), a Read Blob for each 19-octet value.
        #expect(requests == 6)
        // Without `all`: the first response alone, as before.
        let (first, one) = try drive(ReadByUUIDProcedure(uuid: BluetoothUUID(0xFFF9), range: 1...0xFFFF, mtu: 23), &server, mtu: 23)
        #expect(first.map(\.handle) == [3] && one == 1)

        let all = ReadByUUIDProcedure(uuid: BluetoothUUID(0xFFF9), range: 1...0xFFFF, mtu: 23, all: true)
        var r = hostile(all, [.readByTypeResponse([.init(handle: 3, value: [1])]), .readByTypeResponse([.init(handle: 3, value: [1])])])
        #expect(r.requests.last == .readByTypeRequest(start: 4, end: 0xFFFF, type: BluetoothUUID(0xFFF9))
                && r.error == .handleOutOfRange(.readByTypeResponse, handle: 3, range: 4...0xFFFF))
        r = hostile(all, [.readByTypeResponse([.init(handle: 5, value: Array(long[..<19]))]), .readByTypeResponse([.init(handle: 5, value: [1])])])
        #expect(r.requests.last == .readBlobRequest(handle: 5, offset: 19) && r.error == .unexpectedResponse(.readByTypeResponse))
        r = hostile(all, [.readByTypeResponse([.init(handle: 5, value: Array(long[..<19]))]),
                          .errorResponse(request: .readBlobRequest, handle: 5, error: .insufficientAuthentication)])
        #expect(r.error == .att(.errorResponse(request: .readBlobRequest, handle: 5, error: .insufficientAuthentication)))
        // The range's last handle returned: done, without another request.
        let tail = ReadByUUIDProcedure(uuid: BluetoothUUID(0xFFF9), range: 1...3, mtu: 23, all: true)
        r = hostile(tail, [.readByTypeResponse([.init(handle: 3, value: [1])])])
        #expect(r.requests.count == 1 && r.error == nil)
    }
}
