// The AWS SDK for JavaScript v3 (@aws-sdk/client-sqs) against a running
// ackbox (the client matrix). The endpoint comes from ACKBOX_ENDPOINT, the
// key from ACKBOX_ACCESS_KEY_ID / ACKBOX_SECRET_ACCESS_KEY; run
// with NODE_PATH naming the node_modules clients/setup.sh installed. Every
// step checks what it got; the first wrong answer exits non-zero with the
// step's name. Prints one `ok` line per step.
"use strict";

const crypto = require("node:crypto");
const sqs = require("@aws-sdk/client-sqs");

const client = new sqs.SQSClient({
  endpoint: process.env.ACKBOX_ENDPOINT,
  region: "us-east-1",
  credentials: {
    accessKeyId: process.env.ACKBOX_ACCESS_KEY_ID ?? "matrix",
    secretAccessKey: process.env.ACKBOX_SECRET_ACCESS_KEY ?? "matrix-secret-access-key",
  },
});

function step(name, condition, got) {
  if (!condition) {
    console.error(`FAILED ${name}: got ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`ok ${name}`);
}

const md5 = (text) => crypto.createHash("md5").update(text, "utf8").digest("hex");
const send = (command) => client.send(command);
const sorted = (values) => [...values].sort();

async function receiveAll(QueueUrl, count, options = {}) {
  const messages = [];
  for (let attempt = 0; attempt < 10 && messages.length < count; attempt++) {
    const reply = await send(
      new sqs.ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, ...options }),
    );
    messages.push(...(reply.Messages ?? []));
  }
  return messages;
}

async function main() {
  const started = Date.now();
  const name = `matrix-js-${crypto.randomBytes(4).toString("hex")}`;

  // Create: a dead-letter queue, and a queue that gives up after one receive.
  const dlq = (await send(new sqs.CreateQueueCommand({ QueueName: `${name}-dlq` }))).QueueUrl;
  const dlqArn = (
    await send(new sqs.GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ["QueueArn"] }))
  ).Attributes.QueueArn;
  step("create: ARN of the dead-letter queue", dlqArn.endsWith(`:${name}-dlq`), dlqArn);
  const url = (
    await send(
      new sqs.CreateQueueCommand({
        QueueName: name,
        Attributes: {
          VisibilityTimeout: "30",
          RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1 }),
        },
        tags: { team: "matrix" },
      }),
    )
  ).QueueUrl;
  step("create: queue URL", url.endsWith(`/${name}`), url);
  const tags = (await send(new sqs.ListQueueTagsCommand({ QueueUrl: url }))).Tags;
  step("create: tags", JSON.stringify(tags) === JSON.stringify({ team: "matrix" }), tags);

  // Send with attributes of every type; receive them back.
  const body = 'héllo <&> \r\n "quoted"';
  const sent = await send(
    new sqs.SendMessageCommand({
      QueueUrl: url,
      MessageBody: body,
      MessageAttributes: {
        kind: { DataType: "String", StringValue: "card" },
        amount: { DataType: "Number", StringValue: "42" },
        blob: { DataType: "Binary", BinaryValue: Uint8Array.from([0, 1, 255]) },
      },
    }),
  );
  step("send: MD5 of the body", sent.MD5OfMessageBody === md5(body), sent);
  let messages = await receiveAll(url, 1, { MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"] });
  step("receive: one message", messages.length === 1, messages);
  const [message] = messages;
  step("receive: the body, byte for byte", message.Body === body, message.Body);
  const attributes = message.MessageAttributes;
  step("receive: string attribute", attributes.kind.StringValue === "card", attributes);
  step("receive: number attribute", attributes.amount.StringValue === "42", attributes);
  step(
    "receive: binary attribute",
    Buffer.from(attributes.blob.BinaryValue).equals(Buffer.from([0, 1, 255])),
    attributes,
  );
  step("receive: system attributes", message.Attributes.ApproximateReceiveCount === "1", message.Attributes);

  // Change visibility: back at once; the second receive exceeds
  // maxReceiveCount, so the message goes to the dead-letter queue.
  await send(
    new sqs.ChangeMessageVisibilityCommand({ QueueUrl: url, ReceiptHandle: message.ReceiptHandle, VisibilityTimeout: 0 }),
  );
  const again = (await send(new sqs.ReceiveMessageCommand({ QueueUrl: url, WaitTimeSeconds: 0 }))).Messages ?? [];
  step("dead-letter: the source no longer delivers it", again.length === 0, again);
  const dead = await receiveAll(dlq, 1);
  step("dead-letter: the message arrived", dead.length === 1 && dead[0].Body === body, dead);
  await send(new sqs.DeleteMessageCommand({ QueueUrl: dlq, ReceiptHandle: dead[0].ReceiptHandle }));

  // Batches.
  const entries = [0, 1, 2, 3, 4].map((i) => ({ Id: `e${i}`, MessageBody: `batch ${i}` }));
  const batch = await send(new sqs.SendMessageBatchCommand({ QueueUrl: url, Entries: entries }));
  step(
    "batch: five sent",
    batch.Successful.length === 5 && (batch.Failed ?? []).length === 0,
    batch,
  );
  messages = await receiveAll(url, 5);
  step(
    "batch: five received",
    JSON.stringify(sorted(messages.map((m) => m.Body))) === JSON.stringify(entries.map((e) => e.MessageBody)),
    messages,
  );
  const changed = await send(
    new sqs.ChangeMessageVisibilityBatchCommand({
      QueueUrl: url,
      Entries: [
        { Id: "good", ReceiptHandle: messages[0].ReceiptHandle, VisibilityTimeout: 60 },
        { Id: "forged", ReceiptHandle: "forged-handle", VisibilityTimeout: 60 },
      ],
    }),
  );
  step(
    "batch: a forged handle fails alone",
    changed.Successful.map((e) => e.Id).join() === "good" &&
      changed.Failed.map((e) => `${e.Id}:${e.Code}:${e.SenderFault}`).join() === "forged:ReceiptHandleIsInvalid:true",
    changed,
  );
  const deleted = await send(
    new sqs.DeleteMessageBatchCommand({
      QueueUrl: url,
      Entries: messages.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
    }),
  );
  step("batch: five deleted", deleted.Successful.length === 5 && (deleted.Failed ?? []).length === 0, deleted);
  const depth = (
    await send(
      new sqs.GetQueueAttributesCommand({
        QueueUrl: url,
        AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
      }),
    )
  ).Attributes;
  step(
    "batch: the queue is empty",
    depth.ApproximateNumberOfMessages === "0" && depth.ApproximateNumberOfMessagesNotVisible === "0",
    depth,
  );

  // Errors arrive as the SDK's modeled exceptions.
  try {
    await send(new sqs.GetQueueUrlCommand({ QueueName: `${name}-missing` }));
    step("errors: a missing queue is refused", false, "a queue URL");
  } catch (error) {
    step(
      "errors: a missing queue is refused",
      error instanceof sqs.QueueDoesNotExist && error.$metadata.httpStatusCode === 400,
      { name: error.name, message: error.message },
    );
  }

  // FIFO: order within a group, and deduplication.
  const fifo = (
    await send(new sqs.CreateQueueCommand({ QueueName: `${name}.fifo`, Attributes: { FifoQueue: "true" } }))
  ).QueueUrl;
  const ids = [];
  for (const [Body, dedup] of [["first", "a"], ["second", "b"], ["first again", "a"], ["third", "c"]]) {
    const reply = await send(
      new sqs.SendMessageCommand({ QueueUrl: fifo, MessageBody: Body, MessageGroupId: "order-1", MessageDeduplicationId: dedup }),
    );
    ids.push(reply.MessageId);
  }
  step("fifo: a duplicate gets the first send's id", ids[2] === ids[0], ids);
  messages = await receiveAll(fifo, 3, { MessageSystemAttributeNames: ["All"] });
  step(
    "fifo: one group, in order, deduplicated",
    messages.map((m) => m.Body).join() === "first,second,third",
    messages.map((m) => m.Body),
  );
  step(
    "fifo: group id returned",
    messages.every((m) => m.Attributes.MessageGroupId === "order-1"),
    messages.map((m) => m.Attributes),
  );

  for (const queue of [fifo, url, dlq]) {
    await send(new sqs.DeleteQueueCommand({ QueueUrl: queue }));
  }
  const remaining = (await send(new sqs.ListQueuesCommand({ QueueNamePrefix: name }))).QueueUrls ?? [];
  step("delete: the queues are gone", remaining.length === 0, remaining);

  const version = require("@aws-sdk/client-sqs/package.json").version;
  console.log(`passed: @aws-sdk/client-sqs ${version} on Node.js ${process.version} in ${(Date.now() - started) / 1000}s`);
}

main().catch((error) => {
  console.error(`FAILED with ${error.name}: ${error.message}`);
  process.exit(1);
});
